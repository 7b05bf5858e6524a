package expr

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestCompileAndEval(t *testing.T) {
	obj := map[string]any{"status": map[string]any{"phase": "Bound", "replicas": int64(2)}}
	cases := []struct {
		src     string
		want    bool
		compile string // substring of the compile error
	}{
		{src: `self.status.phase == "Bound"`, want: true},
		{src: `self.status.replicas >= 3`, want: false},
		{src: `self.status.missing == "x"`, want: false},
		{src: `has(self.status.phase)`, want: true},
		{src: `self.status.phase ==`, compile: "Syntax error"},
		{src: `1 + 1`, compile: "must return a bool"},
		{src: `"x"`, compile: "must return a bool"},
	}
	for _, tc := range cases {
		t.Run(tc.src, func(t *testing.T) {
			g := NewWithT(t)
			p, err := Compile(tc.src)
			if tc.compile != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.compile)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			got, err := p.Eval(obj)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func TestEvalNonBool(t *testing.T) {
	g := NewWithT(t)
	p, err := Compile(`self.status.phase`)
	g.Expect(err).NotTo(HaveOccurred(), "dyn type passes the compile-time check")
	_, err = p.Eval(map[string]any{"status": map[string]any{"phase": "Bound"}})
	g.Expect(err).To(MatchError(ContainSubstring("want bool")))
}
