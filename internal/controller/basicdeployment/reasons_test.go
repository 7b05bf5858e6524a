package basicdeployment_test

import (
	"context"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadsv1alpha1 "github.com/converge-dev/converge/api/workloads/v1alpha1"
	"github.com/converge-dev/converge/internal/rollout"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

// conditionLog records every condition reason a BasicDeployment's status
// carried, from a watch, so transient reasons are seen too.
type conditionLog struct {
	mu   sync.Mutex
	seen map[string]map[string]bool // condition type -> reasons
}

func watchConditions(t *testing.T, g Gomega, ns string) *conditionLog {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: setup.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	l := &conditionLog{seen: map[string]map[string]bool{}}
	w, err := wc.Watch(t.Context(), &workloadsv1alpha1.BasicDeploymentList{}, client.InNamespace(ns))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(w.Stop)
	go func() {
		for ev := range w.ResultChan() {
			d, ok := ev.Object.(*workloadsv1alpha1.BasicDeployment)
			if !ok {
				continue
			}
			l.mu.Lock()
			for _, c := range d.Status.Conditions {
				if l.seen[c.Type] == nil {
					l.seen[c.Type] = map[string]bool{}
				}
				l.seen[c.Type][c.Reason] = true
			}
			l.mu.Unlock()
		}
	}()
	return l
}

func (l *conditionLog) saw(typ, reason string) func() bool {
	return func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.seen[typ][reason]
	}
}

// TestRolloutReasons walks a BasicDeployment through the states a user sees
// in `kubectl get bd -o wide` and `converge rollout status`, and asserts
// each condition reason by name as it happens: created, available,
// paused and resumed mid-rollout, rolling out, Pods not available, and a
// child the API server refuses to create.
func TestRolloutReasons(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	log := watchConditions(t, g, ns)

	d := rolling(newDeployment(ns, "walk", 2), intstr.FromInt32(1), intstr.FromInt32(0))
	g.Expect(env.Client.Create(ctx, d)).To(Succeed())
	waitComplete(ctx, g, d)
	testenv.Eventually(g, log.saw(workloadsv1alpha1.ProgressingCondition, workloadsv1alpha1.NewReplicaSetCreatedReason)).Should(BeTrue())
	g.Expect(meta.FindStatusCondition(d.Status.Conditions, workloadsv1alpha1.ProgressingCondition).Reason).To(Equal(workloadsv1alpha1.NewReplicaSetAvailableReason))
	g.Expect(meta.FindStatusCondition(d.Status.Conditions, workloadsv1alpha1.AvailableCondition).Reason).To(Equal(workloadsv1alpha1.MinimumReplicasAvailableReason))
	g.Expect(meta.FindStatusCondition(d.Status.Conditions, workloadsv1alpha1.ReadyCondition).Reason).To(Equal(workloadsv1alpha1.AvailableReason))

	// Paused with a new template, then resumed: DeploymentResumed, then the
	// rollout (ReplicaSetUpdated, Ready=False RollingOut) to the end.
	key := client.ObjectKeyFromObject(d)
	g.Expect(rollout.SetPaused(ctx, env.Client, key, true)).To(Succeed())
	setImage(ctx, g, d, "nginx:2")
	testenv.Eventually(g, log.saw(workloadsv1alpha1.ProgressingCondition, workloadsv1alpha1.PausedReason)).Should(BeTrue())
	g.Expect(rollout.SetPaused(ctx, env.Client, key, false)).To(Succeed())
	waitComplete(ctx, g, d)
	testenv.Eventually(g, log.saw(workloadsv1alpha1.ProgressingCondition, workloadsv1alpha1.ResumedReason)).Should(BeTrue(), "Progressing=DeploymentResumed during the rollout")
	testenv.Eventually(g, log.saw(workloadsv1alpha1.ProgressingCondition, workloadsv1alpha1.ReplicaSetUpdatedReason)).Should(BeTrue(), "Progressing=ReplicaSetUpdated during the rollout")
	testenv.Eventually(g, log.saw(workloadsv1alpha1.ReadyCondition, workloadsv1alpha1.RollingOutReason)).Should(BeTrue(), "Ready=RollingOut during the rollout")

	// Pods that never become Ready: Available=False.
	un := newDeployment(ns, "unavailable", 1)
	un.Spec.Template.Annotations = map[string]string{"kwok.converge.dev/never-ready": "true"}
	g.Expect(env.Client.Create(ctx, un)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(un), un)).To(Succeed())
		c := meta.FindStatusCondition(un.Status.Conditions, workloadsv1alpha1.AvailableCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(workloadsv1alpha1.MinimumReplicasUnavailableReason))
		g.Expect(c.Message).To(ContainSubstring("0 of 1 Pods available"))
	}).Should(Succeed())

	// Deleted with --cascade=orphan and created again while its Pods are not
	// Ready: the new object finds the child it left (FoundNewReplicaSet).
	g.Expect(env.Client.Delete(ctx, un, client.PropagationPolicy(metav1.DeletePropagationOrphan))).To(Succeed())
	testenv.Eventually(g, func() bool {
		return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(un), &workloadsv1alpha1.BasicDeployment{}))
	}).Should(BeTrue())
	again := newDeployment(ns, "unavailable", 1)
	again.Spec.Template.Annotations = map[string]string{"kwok.converge.dev/never-ready": "true"}
	g.Expect(env.Client.Create(ctx, again)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(again), again)).To(Succeed())
		g.Expect(children(ctx, g, again)).To(HaveLen(1), "adopted, not created")
	}).Should(Succeed())
	testenv.Eventually(g, log.saw(workloadsv1alpha1.ProgressingCondition, workloadsv1alpha1.FoundNewReplicaSetReason)).Should(BeTrue())
}

// TestReplicaSetCreateRefused: when the API server refuses to create the
// BasicReplicaSet (a cluster admin's admission policy), Progressing is False
// with ReplicaSetCreateError and the server's message, no Pod exists, and
// the rollout completes once the refusal is lifted.
func TestReplicaSetCreateRefused(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	probe := newDeployment(ns, "probe", 1)
	rs := &workloadsv1alpha1.BasicReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe"},
		Spec: workloadsv1alpha1.BasicReplicaSetSpec{Replicas: ptr.To[int32](0), Selector: probe.Spec.Selector, Template: probe.Spec.Template}}
	msg, allow := env.Refuse(t, testenv.Refusal{Namespace: ns, Group: workloadsv1alpha1.GroupVersion.Group,
		Resource: "basicreplicasets", Operation: admissionregistrationv1.Create},
		func(ctx context.Context) error { return env.Client.Create(ctx, rs.DeepCopy(), client.DryRunAll) })

	d := newDeployment(ns, "refused", 2)
	g.Expect(env.Client.Create(ctx, d)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(d), d)).To(Succeed())
		c := meta.FindStatusCondition(d.Status.Conditions, workloadsv1alpha1.ProgressingCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(workloadsv1alpha1.FailedCreateReplicaSetReason))
		g.Expect(c.Message).To(ContainSubstring(msg))
	}).Should(Succeed())
	g.Expect(children(ctx, g, d)).To(BeEmpty())
	g.Expect(livePods(ctx, g, ns, map[string]string{"app": "refused"})).To(BeEmpty())

	allow()
	waitComplete(ctx, g, d)
}
