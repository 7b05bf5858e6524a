package basicdeployment_test

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/converge-dev/converge/internal/testenv"
)

// TestUnhealthyOldPodsGoFirst: Pods that are not available cost no
// availability, so a rollout removes unhealthy old Pods even when nothing
// is available and maxUnavailable's budget is spent, as far as the Pod
// count allows (replicas + maxSurge - minAvailable - the new child's
// unavailable Pods). Every Pod here is Ready but none is available:
// minReadySeconds is an hour.
func TestUnhealthyOldPodsGoFirst(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	d := rolling(newDeployment(ns, "slow", 3), intstr.FromInt32(3), intstr.FromInt32(1))
	d.Spec.MinReadySeconds = 3600
	d.Spec.ProgressDeadlineSeconds = ptr.To(int32(7200))
	g.Expect(env.Client.Create(ctx, d)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		rs := children(ctx, g, d)
		g.Expect(rs).To(HaveLen(1))
		g.Expect(rs[0].Status.ReadyReplicas).To(Equal(int32(3)))
		g.Expect(rs[0].Status.AvailableReplicas).To(BeZero())
	}).WithTimeout(90 * testSecond).Should(Succeed())
	old := children(ctx, g, d)[0].Name

	setImage(ctx, g, d, "nginx:2")
	// 3 old + 3 new Pods, at least 2 must stay available (none is), 3 new
	// ones are unavailable: an unhealthy old Pod may go although nothing is
	// available. (How many go depends on what each pass saw of the new
	// child: availability is not at stake either way.)
	oldReplicas := func(g Gomega) int32 {
		for _, rs := range children(ctx, g, d) {
			if rs.Name == old {
				return ptr.Deref(rs.Spec.Replicas, 1)
			}
		}
		return -1
	}
	testenv.Eventually(g, oldReplicas).WithTimeout(60*testSecond).Should(BeNumerically("<", 3), "no unhealthy old Pod was removed")
}
