package basicreplicaset_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadsv1alpha1 "github.com/converge-dev/converge/api/workloads/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

func newRS(ns, name string, replicas int32) *workloadsv1alpha1.BasicReplicaSet {
	return &workloadsv1alpha1.BasicReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: workloadsv1alpha1.BasicReplicaSetSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}},
			},
		},
	}
}

func activePods(ctx context.Context, g Gomega, ns, app string) []corev1.Pod {
	pods := &corev1.PodList{}
	g.Expect(env.Client.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{"app": app})).To(Succeed())
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp.IsZero() {
			out = append(out, p)
		}
	}
	return out
}

func TestScaleUpAndDown(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	rs := newRS(ns, "web", 3)
	g.Expect(env.Client.Create(ctx, rs)).To(Succeed())

	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(rs), rs)).To(Succeed())
		g.Expect(rs.Status.AvailableReplicas).To(Equal(int32(3)))
		g.Expect(rs.Status.ObservedGeneration).To(Equal(rs.Generation))
		g.Expect(meta.IsStatusConditionTrue(rs.Status.Conditions, workloadsv1alpha1.ReadyCondition)).To(BeTrue())
		testenv.ExpectKstatus(ctx, g, env.Client, rs, kstatus.CurrentStatus, "")
	}).Should(Succeed())
	pods := activePods(ctx, g, ns, "web")
	g.Expect(pods).To(HaveLen(3))
	for _, p := range pods {
		ref := metav1.GetControllerOf(&p)
		g.Expect(ref).NotTo(BeNil())
		g.Expect(ref.UID).To(Equal(rs.UID))
	}

	// Scale through the scale subresource, as kubectl scale does.
	sc := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: 1}}
	g.Expect(env.Client.SubResource("scale").Update(ctx, rs, client.WithSubResourceBody(sc))).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(activePods(ctx, g, ns, "web")).To(HaveLen(1))
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(rs), rs)).To(Succeed())
		g.Expect(rs.Status.Replicas).To(Equal(int32(1)))
	}).Should(Succeed())
}

// TestAdoptsOrphans: a matching Pod without an owner counts towards replicas.
func TestAdoptsOrphans(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	orphan := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orphan", Labels: map[string]string{"app": "adopt"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}},
	}
	g.Expect(env.Client.Create(ctx, orphan)).To(Succeed())
	// Wait for the orphan to run and be Ready before its owner exists. The
	// Pod informer may deliver it after the new BasicReplicaSet, which then
	// creates two Pods, sees three and deletes the least valuable one: a
	// running, Ready orphan is never that one (otherwise a same-second
	// creation timestamp makes it a coin toss and the test flakes).
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(orphan), orphan)).To(Succeed())
		g.Expect(orphan.Status.Phase).To(Equal(corev1.PodRunning))
		ready := false
		for _, c := range orphan.Status.Conditions {
			ready = ready || (c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue)
		}
		g.Expect(ready).To(BeTrue())
	}).Should(Succeed())
	rs := newRS(ns, "adopt", 2)
	g.Expect(env.Client.Create(ctx, rs)).To(Succeed())

	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(orphan), orphan)).To(Succeed())
		ref := metav1.GetControllerOf(orphan)
		g.Expect(ref).NotTo(BeNil())
		g.Expect(ref.Name).To(Equal("adopt"))
		g.Expect(activePods(ctx, g, ns, "adopt")).To(HaveLen(2))
	}).Should(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(activePods(ctx, g, ns, "adopt")).To(HaveLen(2))
	}).WithTimeout(time.Second).Should(Succeed())
}

// TestReplicaFailureReportsTheAPIError: a Pod the API refuses shows up as a
// ReplicaFailure condition carrying the API's message.
func TestReplicaFailureReportsTheAPIError(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	quota := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "two-pods"},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("2")}},
	}
	g.Expect(env.Client.Create(ctx, quota)).To(Succeed())
	// The quota controller must have computed usage before it is enforced.
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(quota), quota)).To(Succeed())
		g.Expect(quota.Status.Used).To(HaveKey(corev1.ResourcePods))
	}).Should(Succeed())

	rs := newRS(ns, "quota", 4)
	g.Expect(env.Client.Create(ctx, rs)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(rs), rs)).To(Succeed())
		c := meta.FindStatusCondition(rs.Status.Conditions, workloadsv1alpha1.ReplicaFailureCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(c.Reason).To(Equal(workloadsv1alpha1.FailedCreateReason))
		g.Expect(c.Message).To(ContainSubstring("exceeded quota"))
		g.Expect(meta.IsStatusConditionFalse(rs.Status.Conditions, workloadsv1alpha1.ReadyCondition)).To(BeTrue())
		// The quota may free up: retried, InProgress for kstatus.
		testenv.ExpectKstatus(ctx, g, env.Client, rs, kstatus.InProgressStatus, meta.FindStatusCondition(rs.Status.Conditions, workloadsv1alpha1.ReadyCondition).Reason)
	}).Should(Succeed())
	g.Expect(len(activePods(ctx, g, ns, "quota"))).To(BeNumerically("<=", 2))
}

// TestGarbageCollection: deleting the BasicReplicaSet deletes its Pods
// through the garbage collector (ownerReferences), not by hand.
func TestGarbageCollection(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	rs := newRS(ns, "gc", 2)
	g.Expect(env.Client.Create(ctx, rs)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) { g.Expect(activePods(ctx, g, ns, "gc")).To(HaveLen(2)) }).Should(Succeed())
	g.Expect(env.Client.Delete(ctx, rs, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
	testenv.Eventually(g, func(g Gomega) { g.Expect(activePods(ctx, g, ns, "gc")).To(BeEmpty()) }).Should(Succeed())
}

// TestNeverCreatesMoreThanWanted watches every Pod event while scaling from
// 0 to 60 and back to 0, and records the most Pods that ever existed at
// once (never above 60) and the Pods created on the way down (none).
func TestNeverCreatesMoreThanWanted(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)

	// The API server closes watchers that fall behind (the race detector
	// slows this one down); re-open from the last resourceVersion seen so no
	// event is missed.
	w, err := env.Clientset.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	var maxSeen, created atomic.Int64
	var mu sync.Mutex
	live := map[string]bool{}
	go func(w watch.Interface) { // ends when the test's context is cancelled
		rv := ""
		for {
			for ev := range w.ResultChan() {
				p, ok := ev.Object.(*corev1.Pod)
				if !ok {
					continue
				}
				rv = p.ResourceVersion
				mu.Lock()
				switch ev.Type {
				case watch.Added, watch.Modified:
					if ev.Type == watch.Added {
						created.Add(1)
					}
					live[p.Name] = true
				case watch.Deleted:
					delete(live, p.Name)
				}
				if n := int64(len(live)); n > maxSeen.Load() {
					maxSeen.Store(n)
				}
				mu.Unlock()
			}
			if ctx.Err() != nil {
				return
			}
			var err error
			if w, err = env.Clientset.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv}); err != nil {
				return
			}
		}
	}(w)

	rs := newRS(ns, "burst", 60)
	g.Expect(env.Client.Create(ctx, rs)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(rs), rs)).To(Succeed())
		g.Expect(rs.Status.AvailableReplicas).To(Equal(int32(60)))
	}).WithTimeout(90 * time.Second).Should(Succeed())
	g.Consistently(func() []corev1.Pod { return activePods(ctx, g, ns, "burst") }).
		WithTimeout(2 * time.Second).Should(HaveLen(60))
	// The watch may still be delivering events: wait until it has seen all
	// 60 (so the bound below is checked over the whole scale-up).
	testenv.Eventually(g, maxSeen.Load).Should(Equal(int64(60)), "the watch saw every Pod")

	// And back to 0: every Pod goes, and no Pod is created on the way down.
	created.Store(0)
	g.Expect(env.Client.Patch(ctx, rs, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"replicas":0}}`)))).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(rs), rs)).To(Succeed())
		g.Expect(rs.Status.ObservedGeneration).To(Equal(rs.Generation))
		g.Expect(rs.Status.Replicas).To(BeZero())
		g.Expect(activePods(ctx, g, ns, "burst")).To(BeEmpty())
	}).WithTimeout(90 * time.Second).Should(Succeed())
	// The watch has caught up once it has seen every Pod deleted.
	testenv.Eventually(g, func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(live)
	}).Should(BeZero(), "the watch saw every Pod go")
	g.Expect(maxSeen.Load()).To(Equal(int64(60)), "no more Pods than replicas at any moment")
	g.Expect(created.Load()).To(BeZero(), "no Pod created while scaling down")
}

// TestPodDeleteRefusedIsFailedDelete: when the API server refuses to delete
// the Pods a scale-down picks (a cluster admin's admission policy), the
// BasicReplicaSet says ReplicaFailure=True FailedDelete with the server's
// message and keeps every Pod; once the refusal is lifted it scales down.
func TestPodDeleteRefusedIsFailedDelete(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	rs := newRS(ns, "refused", 3)
	g.Expect(env.Client.Create(ctx, rs)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(rs), rs)).To(Succeed())
		g.Expect(rs.Status.AvailableReplicas).To(Equal(int32(3)))
	}).WithTimeout(60 * time.Second).Should(Succeed())
	pods := activePods(ctx, g, ns, "refused")
	msg, allow := env.Refuse(t, testenv.Refusal{Namespace: ns, Resource: "pods", Operation: admissionregistrationv1.Delete},
		func(ctx context.Context) error { return env.Client.Delete(ctx, &pods[0], client.DryRunAll) })

	g.Expect(env.Client.Patch(ctx, rs, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"replicas":1}}`)))).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(rs), rs)).To(Succeed())
		c := meta.FindStatusCondition(rs.Status.Conditions, workloadsv1alpha1.ReplicaFailureCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(c.Reason).To(Equal(workloadsv1alpha1.FailedDeleteReason))
		g.Expect(c.Message).To(ContainSubstring(msg))
		r := meta.FindStatusCondition(rs.Status.Conditions, workloadsv1alpha1.ReadyCondition)
		g.Expect(r).NotTo(BeNil())
		g.Expect(r.Reason).To(Equal(workloadsv1alpha1.ScalingDownReason))
	}).Should(Succeed())
	g.Expect(activePods(ctx, g, ns, "refused")).To(HaveLen(3), "a refused delete deletes nothing")

	allow()
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(activePods(ctx, g, ns, "refused")).To(HaveLen(1))
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(rs), rs)).To(Succeed())
		g.Expect(meta.FindStatusCondition(rs.Status.Conditions, workloadsv1alpha1.ReplicaFailureCondition)).To(BeNil())
	}).WithTimeout(60 * time.Second).Should(Succeed())
}
