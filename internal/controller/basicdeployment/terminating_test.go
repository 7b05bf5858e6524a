package basicdeployment_test

import (
	"context"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadsv1alpha1 "github.com/converge-dev/converge/api/workloads/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

// holdFinalizer keeps the test's old Pods in Terminating, as a grace period
// does on a real node (kwok deletes a Pod at once).
const holdFinalizer = "test.converge.dev/hold"

// TestRecreateWaitsForTerminatingPods: with Recreate, no new Pod starts
// while an old one still terminates. The old Pods are held in Terminating by
// a finalizer the test owns; the test waits until the old BasicReplicaSet
// reports them as terminating and the BasicDeployment has observed that
// (the point where a controller without the wait creates the new
// BasicReplicaSet), checks that nothing new exists, then releases them and
// the rollout completes.
func TestRecreateWaitsForTerminatingPods(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	d := newDeployment(ns, "held", 2)
	d.Spec.Strategy.Type = workloadsv1alpha1.RecreateStrategyType
	g.Expect(env.Client.Create(ctx, d)).To(Succeed())
	waitComplete(ctx, g, d)
	olds := children(ctx, g, d)
	g.Expect(olds).To(HaveLen(1))
	oldRS := client.ObjectKeyFromObject(&olds[0])

	pods := livePods(ctx, g, ns, map[string]string{"app": "held"})
	g.Expect(pods).To(HaveLen(2))
	for i := range pods {
		p := &pods[i]
		patch := client.MergeFrom(p.DeepCopy())
		p.Finalizers = append(p.Finalizers, holdFinalizer)
		g.Expect(env.Client.Patch(ctx, p, patch)).To(Succeed())
	}
	release := func() {
		ctx := context.WithoutCancel(ctx) // also in Cleanup, after the test's context ends
		for i := range pods {
			testenv.Eventually(g, func() error {
				p := &corev1.Pod{}
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(&pods[i]), p); err != nil {
					return client.IgnoreNotFound(err)
				}
				patch := client.MergeFrom(p.DeepCopy())
				p.Finalizers = slices.DeleteFunc(p.Finalizers, func(f string) bool { return f == holdFinalizer })
				err := env.Client.Patch(ctx, p, patch)
				if apierrors.IsNotFound(err) {
					return nil
				}
				return err
			}).Should(Succeed())
		}
	}
	t.Cleanup(release) // also on failure, or the namespace never goes

	setImage(ctx, g, d, "nginx:2")
	testenv.Eventually(g, func(g Gomega) {
		rs := &workloadsv1alpha1.BasicReplicaSet{}
		g.Expect(env.Client.Get(ctx, oldRS, rs)).To(Succeed())
		g.Expect(ptr.Deref(rs.Spec.Replicas, 1)).To(BeZero())
		g.Expect(rs.Status.ObservedGeneration).To(Equal(rs.Generation))
		g.Expect(rs.Status.Replicas).To(BeZero())
		g.Expect(rs.Status.TerminatingReplicas).To(Equal(int32(2)), "the held Pods are reported as terminating")
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(d), d)).To(Succeed())
		g.Expect(d.Status.ObservedGeneration).To(Equal(d.Generation))
		g.Expect(d.Status.Replicas).To(BeZero(), "the BasicDeployment has observed the scaled-down child")
	}).WithTimeout(60 * testSecond).Should(Succeed())

	// The BasicDeployment reconciles on each of its child's status updates;
	// the last one above is the moment a controller that did not wait would
	// create the new BasicReplicaSet.
	g.Consistently(func(g Gomega) {
		g.Expect(children(ctx, g, d)).To(HaveLen(1), "no new BasicReplicaSet while old Pods terminate")
		all := &corev1.PodList{}
		g.Expect(env.Client.List(ctx, all, client.InNamespace(ns))).To(Succeed())
		for _, p := range all.Items {
			g.Expect(p.DeletionTimestamp.IsZero()).To(BeFalse(), "pod %s started while old Pods terminate", p.Name)
		}
	}).WithTimeout(3 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())

	release()
	waitComplete(ctx, g, d)
	g.Expect(children(ctx, g, d)).To(HaveLen(2))
	for _, p := range livePods(ctx, g, ns, map[string]string{"app": "held"}) {
		g.Expect(p.Spec.Containers[0].Image).To(Equal("nginx:2"))
	}
}
