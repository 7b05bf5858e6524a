package receiver

import (
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestOptionsEnabled(t *testing.T) {
	g := NewWithT(t)
	for addr, want := range map[string]bool{"": false, "0": false, ":9292": true, "127.0.0.1:0": true, "00": true} {
		g.Expect(Options{BindAddress: addr}.Enabled()).To(Equal(want), "BindAddress %q", addr)
	}
}

// TestSourcesArePrunedWhenFull: at maxSources remembered sources, a new
// source makes the server forget the sources whose bucket is full again (a
// fresh limiter would be the same) and keep the others, which stay limited;
// when no bucket is full it forgets them all and the global limit holds.
func TestSourcesArePrunedWhenFull(t *testing.T) {
	g := NewWithT(t)
	t0 := time.Unix(1e9, 0)
	now := t0
	s := &Server{Options: Options{Rate: 1e9, Burst: 1e9, SourceRate: 1, SourceBurst: 1}, Now: func() time.Time { return now }}
	src := func(i int) string { return "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256) }
	allowed := func(i int) bool {
		_, ok := s.allow(src(i))
		return ok
	}

	// Half the sources spend their token at t0, and are full again 2 s
	// later; the other half spend it then.
	for i := range maxSources / 2 {
		g.Expect(allowed(i)).To(BeTrue())
	}
	now = t0.Add(2 * time.Second)
	for i := maxSources / 2; i < maxSources; i++ {
		g.Expect(allowed(i)).To(BeTrue())
	}
	g.Expect(s.sources).To(HaveLen(maxSources))
	g.Expect(allowed(maxSources)).To(BeTrue(), "a new source")
	g.Expect(s.sources).To(HaveLen(maxSources/2+1), "the full buckets are forgotten")
	g.Expect(s.sources).To(HaveKey(src(maxSources / 2)))
	g.Expect(s.sources).NotTo(HaveKey(src(0)))
	g.Expect(allowed(maxSources/2)).To(BeFalse(), "a source that spent its token is still limited")

	// Every bucket empty: all are forgotten.
	for i := maxSources + 1; len(s.sources) < maxSources; i++ {
		g.Expect(allowed(i)).To(BeTrue())
	}
	g.Expect(allowed(maxSources/2 + 1)).To(BeFalse())
	g.Expect(allowed(2*maxSources)).To(BeTrue(), "a new source")
	g.Expect(s.sources).To(HaveLen(1), "no bucket was full: every source is forgotten")
	g.Expect(allowed(maxSources/2+1)).To(BeTrue(), "a forgotten source starts again with a full bucket")
}
