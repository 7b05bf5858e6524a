package setup

import (
	"testing"

	. "github.com/onsi/gomega"
)

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
			f := QPSFlag(&m)
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
	f := BurstFlag(&bursts)
	g.Expect(f.Set("40,sync=2000")).To(Succeed())
	g.Expect(f.String()).To(Equal("40,sync=2000"))
	err := f.Set("basicreplicaset=1.5")
	g.Expect(err).To(MatchError(ContainSubstring("--kube-api-burst")))
	err = f.Set("bogus=3")
	g.Expect(err).To(MatchError(ContainSubstring(`--kube-api-burst: unknown controller "bogus"`)))
}

func TestBudgetResolution(t *testing.T) {
	g := NewWithT(t)
	o := DefaultOptions()
	g.Expect(o.Budget("sync")).To(Equal(Budget{QPS: 500, Burst: 1000}))
	g.Expect(o.Budget("gitrepository")).To(Equal(Budget{QPS: 50, Burst: 100}))
	g.Expect(o.Budget("basicreplicaset")).To(Equal(Budget{QPS: 20, Burst: 30}))
	g.Expect(o.Budget("")).To(Equal(ManagerBudget))
	for _, n := range ControllerNames() {
		g.Expect(defaultBudgets).To(HaveKey(n), "every controller has a documented default budget")
	}

	// A bare N overrides every default; a named entry overrides that.
	o.KubeAPIQPS = map[string]float32{"": 30, "sync": 100}
	o.KubeAPIBurst = map[string]int{"basicdeployment": 7}
	g.Expect(o.Budget("sync")).To(Equal(Budget{QPS: 100, Burst: 1000}))
	g.Expect(o.Budget("gitrepository")).To(Equal(Budget{QPS: 30, Burst: 100}))
	g.Expect(o.Budget("basicdeployment")).To(Equal(Budget{QPS: 30, Burst: 7}))
	g.Expect(o.Budget("")).To(Equal(Budget{QPS: 30, Burst: 30}))
	g.Expect(validateBudgets(o)).To(Succeed())

	o.KubeAPIBurst = map[string]int{"nosuch": 3}
	g.Expect(validateBudgets(o)).To(MatchError(ContainSubstring(`--kube-api-burst: unknown controller "nosuch"`)))
	o.KubeAPIBurst = map[string]int{"sync": 0}
	g.Expect(validateBudgets(o)).To(MatchError(ContainSubstring("controller sync would get 100 QPS, burst 0")))
	o.KubeAPIQPS = map[string]float32{"sync": -1}
	g.Expect(validateBudgets(o)).To(Succeed(), "an unlimited budget needs no burst")
	g.Expect(o.Budget("sync").Unlimited()).To(BeTrue())
}
