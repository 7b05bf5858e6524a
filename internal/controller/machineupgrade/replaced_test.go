package machineupgrade_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
	"github.com/converge-dev/converge/internal/setup"
)

// A Node replaced under the same name while the Machine's status.nodeRef
// still records the old one (here the Machine controller is not running to
// catch up) is not the Machine's: the upgrade compares the recorded UID with
// the live Node's, so it never cordons, drains or power cycles through the
// replacement, even one carrying the same providerID and annotations. The
// step waits, saying why, and the Pod on the replacement keeps running.
func TestUpgradeLeavesAReplacedNodeAlone(t *testing.T) {
	ns, _ := storedFleet(t, "rn")
	g := NewWithT(t)
	ctx := t.Context()
	m := &machinev1alpha1.Machine{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "rn-0"}, m)).To(Succeed())
	old := &corev1.Node{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, old)).To(Succeed())
	g.Expect(m.Status.NodeRef.UID).To(Equal(old.UID))

	g.Expect(env.Client.Delete(ctx, old)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(old), &corev1.Node{}))
	}).WithTimeout(wait).Should(BeTrue())
	repl := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: old.Name, Labels: old.Labels, Annotations: old.Annotations},
		Spec: corev1.NodeSpec{ProviderID: old.Spec.ProviderID}}
	g.Expect(env.Client.Create(ctx, repl)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), repl) })
	g.Expect(repl.UID).NotTo(Equal(old.UID))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bystander"},
		Spec: corev1.PodSpec{NodeName: repl.Name, Containers: []corev1.Container{{Name: "c", Image: "c"}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}}}
	g.Expect(env.Client.Create(ctx, pod)).To(Succeed())

	// Only the upgrade's controller: the Machine's nodeRef stays as recorded.
	env.StartManager(t, func(o *setup.Options) { o.Controllers = []string{"machineupgrade"} })
	u := newUpgrade(ns, "rn", "rn", 1)
	g.Expect(env.Client.Create(ctx, u)).To(Succeed())
	u = waitUpgrade(t, u, func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
		mp := u.Status.Machine("rn-0")
		g.Expect(mp).NotTo(BeNil())
		g.Expect(mp.Step).To(Equal(upgradev1alpha1.StepCordon))
		g.Expect(mp.Message).To(ContainSubstring("Node " + repl.Name + " is not the one Machine rn-0 recorded"))
	})
	g.Consistently(func(g Gomega) {
		got := &corev1.Node{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(repl), got)).To(Succeed())
		g.Expect(got.Spec.Unschedulable).To(BeFalse(), "the replacement is never cordoned")
		p := &corev1.Pod{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pod), p)).To(Succeed())
		g.Expect(p.DeletionTimestamp).To(BeNil(), "its Pod is never evicted")
		cur := &machinev1alpha1.Machine{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(m), cur)).To(Succeed())
		g.Expect(cur.Spec.Image).To(Equal("v1"), "the Machine is not changed")
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(u), u)).To(Succeed())
		g.Expect(u.Status.Machine("rn-0").Step).To(Equal(upgradev1alpha1.StepCordon), "the upgrade waits at the cordon")
	}).WithTimeout(3 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())

	g.Expect(env.Client.Delete(ctx, u)).To(Succeed())
	gone(t, u)
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(repl), repl)).To(Succeed())
	g.Expect(repl.Spec.Unschedulable).To(BeFalse(), "the deletion leaves it alone too")
}
