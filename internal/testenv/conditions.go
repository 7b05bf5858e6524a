package testenv

import (
	"github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// HasCondition asserts that conds holds the condition typ with status and
// reason (the messages name its message) and returns it.
func HasCondition(g gomega.Gomega, conds []metav1.Condition, typ string, status metav1.ConditionStatus, reason string) *metav1.Condition {
	c := meta.FindStatusCondition(conds, typ)
	g.Expect(c).NotTo(gomega.BeNil(), "condition %s", typ)
	g.Expect(c.Reason).To(gomega.Equal(reason), "%s reason (message %q)", typ, c.Message)
	g.Expect(c.Status).To(gomega.Equal(status), "%s status (message %q)", typ, c.Message)
	return c
}
