package setup

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/converge-dev/converge/internal/apibudget"
)

func TestBudgetResolution(t *testing.T) {
	g := NewWithT(t)
	o := DefaultOptions()
	g.Expect(o.Budget("sync")).To(Equal(apibudget.Budget{QPS: 500, Burst: 1000}))
	g.Expect(o.Budget("gitrepository")).To(Equal(apibudget.Budget{QPS: 50, Burst: 100}))
	g.Expect(o.Budget("basicreplicaset")).To(Equal(apibudget.Budget{QPS: 20, Burst: 30}))
	g.Expect(o.Budget("")).To(Equal(apibudget.Manager))
	for _, n := range ControllerNames() {
		g.Expect(defaultBudgets).To(HaveKey(n), "every controller has a documented default budget")
	}

	// A bare N overrides every default; a named entry overrides that.
	o.KubeAPIQPS = map[string]float32{"": 30, "sync": 100}
	o.KubeAPIBurst = map[string]int{"basicdeployment": 7}
	g.Expect(o.Budget("sync")).To(Equal(apibudget.Budget{QPS: 100, Burst: 1000}))
	g.Expect(o.Budget("gitrepository")).To(Equal(apibudget.Budget{QPS: 30, Burst: 100}))
	g.Expect(o.Budget("basicdeployment")).To(Equal(apibudget.Budget{QPS: 30, Burst: 7}))
	g.Expect(o.Budget("")).To(Equal(apibudget.Budget{QPS: 30, Burst: 30}))
	g.Expect(validateBudgets(o)).To(Succeed())

	o.KubeAPIBurst = map[string]int{"nosuch": 3}
	g.Expect(validateBudgets(o)).To(MatchError(ContainSubstring(`--kube-api-burst: unknown controller "nosuch"`)))
	o.KubeAPIBurst = map[string]int{"sync": 0}
	g.Expect(validateBudgets(o)).To(MatchError(ContainSubstring("controller sync would get 100 QPS, burst 0")))
	o.KubeAPIQPS = map[string]float32{"sync": -1}
	g.Expect(validateBudgets(o)).To(Succeed(), "an unlimited budget needs no burst")
	g.Expect(o.Budget("sync").Unlimited()).To(BeTrue())
}
