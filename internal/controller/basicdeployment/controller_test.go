package basicdeployment_test

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadsv1alpha1 "github.com/converge-dev/converge/api/workloads/v1alpha1"
	"github.com/converge-dev/converge/internal/rollout"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestRollingUpdateBounds rolls a new image out under several surge and
// unavailability settings and checks, at every Pod event the API server
// sent, that no more than replicas + maxSurge Pods existed and no fewer
// than replicas - maxUnavailable were Ready.
func TestRollingUpdateBounds(t *testing.T) {
	testenv.Need(t, env)
	cases := []struct {
		name              string
		replicas          int32
		surge, unavail    intstr.IntOrString
		maxLive, minReady int
	}{
		{"surge2-unavailable1", 6, intstr.FromInt32(2), intstr.FromInt32(1), 8, 5},
		{"surge0-unavailable2", 5, intstr.FromInt32(0), intstr.FromInt32(2), 5, 3},
		{"percent-surge50-unavailable0", 4, intstr.FromString("50%"), intstr.FromString("0%"), 6, 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			ctx := t.Context()
			ns := env.NewNamespace(t)
			rec := recordPods(t, ns)
			d := rolling(newDeployment(ns, "web", tc.replicas), tc.surge, tc.unavail)
			g.Expect(env.Client.Create(ctx, d)).To(Succeed())
			waitComplete(ctx, g, d)
			rec.caughtUp(g, int(tc.replicas))
			first := children(ctx, g, d)
			g.Expect(first).To(HaveLen(1))
			g.Expect(first[0].Name).To(Equal("web-"+first[0].Labels[workloadsv1alpha1.PodTemplateHashLabel]), "named after the template hash")
			g.Expect(first[0].Annotations).To(HaveKeyWithValue(workloadsv1alpha1.RevisionAnnotation, "1"))

			rec.arm()
			setImage(ctx, g, d, "nginx:2")
			waitComplete(ctx, g, d)
			rec.caughtUp(g, int(tc.replicas))
			maxLive, minReady, _ := rec.bounds()
			t.Logf("rollout: %s", rec)
			g.Expect(maxLive).To(BeNumerically("<=", tc.maxLive), "more than replicas + maxSurge Pods at once")
			g.Expect(minReady).To(BeNumerically(">=", tc.minReady), "fewer than replicas - maxUnavailable Ready Pods")

			g.Expect(d.Status.CurrentRevision).To(Equal(int64(2)))
			rss := children(ctx, g, d)
			g.Expect(rss).To(HaveLen(2))
			for _, rs := range rss {
				switch rs.Annotations[workloadsv1alpha1.RevisionAnnotation] {
				case "1":
					g.Expect(*rs.Spec.Replicas).To(BeZero())
				case "2":
					g.Expect(*rs.Spec.Replicas).To(Equal(tc.replicas))
					g.Expect(rs.Spec.Template.Spec.Containers[0].Image).To(Equal("nginx:2"))
				default:
					t.Fatalf("unexpected revision on %s: %v", rs.Name, rs.Annotations)
				}
			}
			for _, p := range livePods(ctx, g, ns, map[string]string{"app": "web"}) {
				g.Expect(p.Spec.Containers[0].Image).To(Equal("nginx:2"))
			}
		})
	}
}

// TestRecreate: old Pods are all gone before any new one exists.
func TestRecreate(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	rec := recordPods(t, ns)
	d := newDeployment(ns, "db", 3)
	d.Spec.Strategy.Type = workloadsv1alpha1.RecreateStrategyType
	g.Expect(env.Client.Create(ctx, d)).To(Succeed())
	waitComplete(ctx, g, d)
	rec.caughtUp(g, 3)
	g.Expect(d.Spec.Strategy.RollingUpdate).To(BeNil(), "the webhook defaults no rollingUpdate for Recreate")

	rec.arm()
	setImage(ctx, g, d, "nginx:2")
	waitComplete(ctx, g, d)
	rec.caughtUp(g, 3)
	maxLive, _, maxHashes := rec.bounds()
	t.Logf("recreate: %s", rec)
	g.Expect(maxHashes).To(Equal(1), "old and new Pods never exist at the same time")
	g.Expect(maxLive).To(BeNumerically("<=", 3))
}

// TestRollbackAndHistory: revisions are numbered, history is trimmed to
// revisionHistoryLimit, and undo brings an old template back as a new
// revision, reusing its BasicReplicaSet.
func TestRollbackAndHistory(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	d := rolling(newDeployment(ns, "api", 2), intstr.FromInt32(1), intstr.FromInt32(0))
	d.Spec.RevisionHistoryLimit = ptr.To[int32](2)
	d.Annotations = map[string]string{workloadsv1alpha1.ChangeCauseAnnotation: "image 1"}
	g.Expect(env.Client.Create(ctx, d)).To(Succeed())
	waitComplete(ctx, g, d)
	for i, img := range []string{"nginx:2", "nginx:3", "nginx:4"} {
		testenv.Eventually(g, func() error {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
				return err
			}
			d.Spec.Template.Spec.Containers[0].Image = img
			d.Annotations[workloadsv1alpha1.ChangeCauseAnnotation] = "image " + strings.TrimPrefix(img, "nginx:")
			return env.Client.Update(ctx, d)
		}).Should(Succeed())
		waitComplete(ctx, g, d)
		g.Expect(d.Status.CurrentRevision).To(Equal(int64(i + 2)))
	}
	key := client.ObjectKeyFromObject(d)
	// Revision 4 is current; limit 2 keeps revisions 2 and 3.
	testenv.Eventually(g, func(g Gomega) {
		revs, err := rollout.History(ctx, env.Client, key)
		g.Expect(err).NotTo(HaveOccurred())
		var nums []int64
		for _, r := range revs {
			nums = append(nums, r.Number)
		}
		g.Expect(nums).To(Equal([]int64{2, 3, 4}))
		g.Expect(revs[0].ChangeCause).To(Equal("image 2"))
	}).Should(Succeed())

	// Undo to revision 2: its BasicReplicaSet comes back as revision 5.
	revs, err := rollout.History(ctx, env.Client, key)
	g.Expect(err).NotTo(HaveOccurred())
	rev2 := revs[0].ReplicaSet.Name
	to, err := rollout.Undo(ctx, env.Client, key, 2)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(to).To(Equal(int64(2)))
	waitComplete(ctx, g, d)
	g.Expect(d.Spec.Template.Spec.Containers[0].Image).To(Equal("nginx:2"))
	g.Expect(d.Annotations).To(HaveKeyWithValue(workloadsv1alpha1.ChangeCauseAnnotation, "image 2"))
	g.Expect(d.Status.CurrentRevision).To(Equal(int64(5)))
	rs := &workloadsv1alpha1.BasicReplicaSet{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: rev2}, rs)).To(Succeed())
	g.Expect(rs.Annotations).To(HaveKeyWithValue(workloadsv1alpha1.RevisionAnnotation, "5"))
	g.Expect(rs.Annotations).To(HaveKeyWithValue(workloadsv1alpha1.RevisionHistoryAnnotation, "2"))
	g.Expect(*rs.Spec.Replicas).To(Equal(int32(2)))

	// Undo without a revision goes to the previous one (4); undo to the
	// current template is refused as kubectl does.
	to, err = rollout.Undo(ctx, env.Client, key, 0)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(to).To(Equal(int64(4)))
	waitComplete(ctx, g, d)
	g.Expect(d.Spec.Template.Spec.Containers[0].Image).To(Equal("nginx:4"))
	_, err = rollout.Undo(ctx, env.Client, key, 6)
	g.Expect(err).To(MatchError(rollout.ErrAlreadyCurrent))
	_, err = rollout.Undo(ctx, env.Client, key, 1)
	g.Expect(err).To(MatchError(ContainSubstring("unable to find the specified revision 1")))
}

// TestPauseAndResume: a paused BasicDeployment starts no rollout but still
// scales; resuming rolls the pending template out.
func TestPauseAndResume(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	d := newDeployment(ns, "paused", 2)
	g.Expect(env.Client.Create(ctx, d)).To(Succeed())
	waitComplete(ctx, g, d)
	key := client.ObjectKeyFromObject(d)

	g.Expect(rollout.SetPaused(ctx, env.Client, key, true)).To(Succeed())
	g.Expect(rollout.SetPaused(ctx, env.Client, key, true)).To(MatchError(ContainSubstring("already paused")))
	setImage(ctx, g, d, "nginx:2")
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, key, d)).To(Succeed())
		g.Expect(d.Status.ObservedGeneration).To(Equal(d.Generation))
		c := meta.FindStatusCondition(d.Status.Conditions, workloadsv1alpha1.ProgressingCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionUnknown))
		g.Expect(c.Reason).To(Equal(workloadsv1alpha1.PausedReason))
	}).Should(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(children(ctx, g, d)).To(HaveLen(1), "no new BasicReplicaSet while paused")
	}).WithTimeout(2 * testSecond).Should(Succeed())

	// Scaling still works while paused.
	testenv.Eventually(g, func() error {
		if err := env.Client.Get(ctx, key, d); err != nil {
			return err
		}
		d.Spec.Replicas = ptr.To[int32](4)
		return env.Client.Update(ctx, d)
	}).Should(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(livePods(ctx, g, ns, map[string]string{"app": "paused"})).To(HaveLen(4))
	}).Should(Succeed())

	g.Expect(rollout.SetPaused(ctx, env.Client, key, false)).To(Succeed())
	waitComplete(ctx, g, d)
	g.Expect(d.Status.CurrentRevision).To(Equal(int64(2)))
	for _, p := range livePods(ctx, g, ns, map[string]string{"app": "paused"}) {
		g.Expect(p.Spec.Containers[0].Image).To(Equal("nginx:2"))
	}
}

// TestProgressDeadline: a rollout that cannot progress turns Progressing
// False with ProgressDeadlineExceeded and says why: a Pod that never becomes
// Ready, or a Pod the API refuses. The rollout goes on and the old Pods stay.
func TestProgressDeadline(t *testing.T) {
	testenv.Need(t, env)
	t.Run("never-ready", func(t *testing.T) {
		t.Parallel()
		g := NewWithT(t)
		ctx := t.Context()
		ns := env.NewNamespace(t)
		d := rolling(newDeployment(ns, "stuck", 2), intstr.FromInt32(1), intstr.FromInt32(0))
		d.Spec.ProgressDeadlineSeconds = ptr.To[int32](3)
		g.Expect(env.Client.Create(ctx, d)).To(Succeed())
		waitComplete(ctx, g, d)

		testenv.Eventually(g, func() error {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
				return err
			}
			d.Spec.Template.Annotations = map[string]string{"kwok.converge.dev/never-ready": "true"}
			return env.Client.Update(ctx, d)
		}).Should(Succeed())
		c := waitDeadline(t, g, d)
		g.Expect(c.Message).To(ContainSubstring("has timed out progressing"))
		g.Expect(c.Message).To(MatchRegexp(`Pod stuck-\w+-\w+ is not Ready`), "names the Pod that is not Ready")
		g.Expect(d.Status.AvailableReplicas).To(Equal(int32(2)), "the old Pods stay (maxUnavailable 0)")
		ready := meta.FindStatusCondition(d.Status.Conditions, workloadsv1alpha1.ReadyCondition)
		g.Expect(ready.Reason).To(Equal(workloadsv1alpha1.ProgressDeadlineExceededReason))

		// Rolling back recovers: Progressing turns True again.
		_, err := rollout.Undo(ctx, env.Client, client.ObjectKeyFromObject(d), 0)
		g.Expect(err).NotTo(HaveOccurred())
		waitComplete(ctx, g, d)
		g.Expect(meta.IsStatusConditionTrue(d.Status.Conditions, workloadsv1alpha1.ProgressingCondition)).To(BeTrue())
	})
	t.Run("refused-by-quota", func(t *testing.T) {
		t.Parallel()
		g := NewWithT(t)
		ctx := t.Context()
		ns := env.NewNamespace(t)
		g.Expect(env.Client.Create(ctx, &corev1.ResourceQuota{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "two-pods"},
			Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("2")}},
		})).To(Succeed())
		d := rolling(newDeployment(ns, "quota", 2), intstr.FromInt32(1), intstr.FromInt32(0))
		d.Spec.ProgressDeadlineSeconds = ptr.To[int32](3)
		g.Expect(env.Client.Create(ctx, d)).To(Succeed())
		waitComplete(ctx, g, d)
		setImage(ctx, g, d, "nginx:2")
		c := waitDeadline(t, g, d)
		g.Expect(c.Message).To(ContainSubstring("exceeded quota"), "carries the API's refusal")
	})
}

func waitDeadline(t *testing.T, g Gomega, d *workloadsv1alpha1.BasicDeployment) *metav1.Condition {
	var c *metav1.Condition
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(d), d)).To(Succeed())
		c = meta.FindStatusCondition(d.Status.Conditions, workloadsv1alpha1.ProgressingCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(workloadsv1alpha1.ProgressDeadlineExceededReason), "Progressing: %s", c.Message)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		// kstatus reads it Failed, as it reads a Deployment past its deadline.
		testenv.ExpectKstatus(t.Context(), g, env.Client, d, kstatus.FailedStatus, workloadsv1alpha1.ProgressDeadlineExceededReason)
	}).Should(Succeed())
	t.Logf("Progressing=False: %s", c.Message)
	return c
}

// TestOrphanAndAdopt: deleting with --cascade=orphan leaves the
// BasicReplicaSet and its Pods; a new BasicDeployment with the same
// template adopts them without replacing a Pod.
func TestOrphanAndAdopt(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	d := newDeployment(ns, "keep", 3)
	g.Expect(env.Client.Create(ctx, d)).To(Succeed())
	waitComplete(ctx, g, d)
	before := map[string]bool{}
	for _, p := range livePods(ctx, g, ns, map[string]string{"app": "keep"}) {
		before[string(p.UID)] = true
	}
	rsName := children(ctx, g, d)[0].Name

	g.Expect(env.Client.Delete(ctx, d, client.PropagationPolicy(metav1.DeletePropagationOrphan))).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		rs := &workloadsv1alpha1.BasicReplicaSet{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: rsName}, rs)).To(Succeed())
		g.Expect(metav1.GetControllerOf(rs)).To(BeNil(), "orphaned")
	}).Should(Succeed())
	g.Expect(livePods(ctx, g, ns, map[string]string{"app": "keep"})).To(HaveLen(3))
	// The child is orphaned before the orphan finalizer leaves the parent:
	// wait until the old object is gone, or the create is refused.
	testenv.Eventually(g, func() bool {
		return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(d), &workloadsv1alpha1.BasicDeployment{}))
	}).Should(BeTrue())

	d2 := newDeployment(ns, "keep", 3)
	g.Expect(env.Client.Create(ctx, d2)).To(Succeed())
	waitComplete(ctx, g, d2)
	rss := children(ctx, g, d2)
	g.Expect(rss).To(HaveLen(1))
	g.Expect(rss[0].Name).To(Equal(rsName), "adopted, not recreated")
	after := livePods(ctx, g, ns, map[string]string{"app": "keep"})
	g.Expect(after).To(HaveLen(3))
	for _, p := range after {
		g.Expect(before).To(HaveKey(string(p.UID)), "no Pod replaced")
	}

	// Cascading deletion is the garbage collector's: everything goes.
	g.Expect(env.Client.Delete(ctx, d2, client.PropagationPolicy(metav1.DeletePropagationForeground))).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(livePods(ctx, g, ns, map[string]string{"app": "keep"})).To(BeEmpty())
		list := &workloadsv1alpha1.BasicReplicaSetList{}
		g.Expect(env.Client.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		g.Expect(list.Items).To(BeEmpty())
	}).WithTimeout(60 * testSecond).Should(Succeed())
}
