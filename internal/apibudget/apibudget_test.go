package apibudget

import (
	"testing"

	. "github.com/onsi/gomega"
)

// known stands for the wiring table's controller names.
func known() []string { return []string{"basicdeployment", "basicreplicaset", "database", "sync"} }

func TestBudgetFlags(t *testing.T) {
	cases := []struct {
		name    string
		qps     []string // each one Set call
		wantQPS map[string]float32
		wantErr []string
	}{
		{name: "default for all", qps: []string{"50"}, wantQPS: map[string]float32{"": 50}},
		{name: "pairs", qps: []string{"sync=50,basicdeployment=20"}, wantQPS: map[string]float32{"sync": 50, "basicdeployment": 20}},
		{name: "repeated and mixed", qps: []string{"10", " sync = 75 ", "database=1.5"},
			wantQPS: map[string]float32{"": 10, "sync": 75, "database": 1.5}},
		{name: "off", qps: []string{"sync=-1"}, wantQPS: map[string]float32{"sync": -1}},
		{name: "unknown controller", qps: []string{"sync=5,nosuch=5"}, wantErr: []string{"--kube-api-qps", `unknown controller "nosuch"`, "basicreplicaset"}},
		{name: "not a number", qps: []string{"sync=fast"}, wantErr: []string{"--kube-api-qps", `"sync=fast"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			var m map[string]float32
			f := QPSFlag(&m, known)
			var err error
			for _, v := range tc.qps {
				if err = f.Set(v); err != nil {
					break
				}
			}
			if tc.wantErr != nil {
				g.Expect(err).To(HaveOccurred())
				for _, s := range tc.wantErr {
					g.Expect(err.Error()).To(ContainSubstring(s))
				}
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(m).To(Equal(tc.wantQPS))
		})
	}

	g := NewWithT(t)
	var bursts map[string]int
	f := BurstFlag(&bursts, known)
	g.Expect(f.Set("40,sync=2000")).To(Succeed())
	g.Expect(f.String()).To(Equal("40,sync=2000"))
	err := f.Set("basicreplicaset=1.5")
	g.Expect(err).To(MatchError(ContainSubstring("--kube-api-burst")))
	err = f.Set("bogus=3")
	g.Expect(err).To(MatchError(ContainSubstring(`--kube-api-burst: unknown controller "bogus"`)))
}
