package basicdeployment_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadsv1alpha1 "github.com/converge-dev/converge/api/workloads/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

func newDeployment(ns, name string, replicas int32) *workloadsv1alpha1.BasicDeployment {
	return &workloadsv1alpha1.BasicDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: workloadsv1alpha1.BasicDeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx:1"}}},
			},
		},
	}
}

func rolling(d *workloadsv1alpha1.BasicDeployment, surge, unavailable intstr.IntOrString) *workloadsv1alpha1.BasicDeployment {
	d.Spec.Strategy = workloadsv1alpha1.BasicDeploymentStrategy{
		Type:          workloadsv1alpha1.RollingUpdateStrategyType,
		RollingUpdate: &workloadsv1alpha1.RollingUpdateBasicDeployment{MaxSurge: &surge, MaxUnavailable: &unavailable},
	}
	return d
}

// setImage changes the template's image (a new revision), retrying on
// conflicts with the controller's status writes.
func setImage(ctx context.Context, g Gomega, d *workloadsv1alpha1.BasicDeployment, image string) {
	testenv.Eventually(g, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
			return err
		}
		d.Spec.Template.Spec.Containers[0].Image = image
		return env.Client.Update(ctx, d)
	}).Should(Succeed())
}

// waitComplete waits until the rollout of the current generation is done.
func waitComplete(ctx context.Context, g Gomega, d *workloadsv1alpha1.BasicDeployment) {
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(d), d)).To(Succeed())
		want := ptr.Deref(d.Spec.Replicas, 1)
		g.Expect(d.Status.ObservedGeneration).To(Equal(d.Generation))
		g.Expect(d.Status.UpdatedReplicas).To(Equal(want))
		g.Expect(d.Status.Replicas).To(Equal(want))
		g.Expect(d.Status.AvailableReplicas).To(Equal(want))
		g.Expect(meta.IsStatusConditionTrue(d.Status.Conditions, workloadsv1alpha1.ReadyCondition)).To(BeTrue(),
			"Ready: %v", meta.FindStatusCondition(d.Status.Conditions, workloadsv1alpha1.ReadyCondition))
		testenv.ExpectKstatus(ctx, g, env.Client, d, kstatus.CurrentStatus, "")
	}).WithTimeout(90 * testSecond).Should(Succeed())
}

// children lists the BasicReplicaSets controlled by d.
func children(ctx context.Context, g Gomega, d *workloadsv1alpha1.BasicDeployment) []workloadsv1alpha1.BasicReplicaSet {
	list := &workloadsv1alpha1.BasicReplicaSetList{}
	g.Expect(env.Client.List(ctx, list, client.InNamespace(d.Namespace))).To(Succeed())
	var out []workloadsv1alpha1.BasicReplicaSet
	for _, rs := range list.Items {
		if ref := metav1.GetControllerOf(&rs); ref != nil && ref.UID == d.UID {
			out = append(out, rs)
		}
	}
	return out
}

func livePods(ctx context.Context, g Gomega, ns string, sel map[string]string) []corev1.Pod {
	pods := &corev1.PodList{}
	g.Expect(env.Client.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels(sel))).To(Succeed())
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp.IsZero() {
			out = append(out, p)
		}
	}
	return out
}

// podRecorder watches a namespace's Pods and records, at every event, how
// many exist (not being deleted), how many of those are Ready, and which
// pod-template-hash values exist at once. The API server closes watchers
// that fall behind, so it re-opens from the last resourceVersion and misses
// nothing.
type podRecorder struct {
	mu       sync.Mutex
	pods     map[string]*corev1.Pod
	maxLive  int
	minReady int // from when armed
	armed    bool
	maxHash  int
	events   int
}

func recordPods(t *testing.T, ns string) *podRecorder {
	ctx := t.Context()
	r := &podRecorder{pods: map[string]*corev1.Pod{}, minReady: 1 << 30}
	w, err := env.Clientset.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watching Pods: %v", err)
	}
	go func(w watch.Interface) {
		rv := ""
		for {
			for ev := range w.ResultChan() {
				p, ok := ev.Object.(*corev1.Pod)
				if !ok {
					continue
				}
				rv = p.ResourceVersion
				r.observe(ev.Type, p)
			}
			if ctx.Err() != nil {
				return
			}
			if w, err = env.Clientset.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv}); err != nil {
				return
			}
		}
	}(w)
	return r
}

func (r *podRecorder) observe(t watch.EventType, p *corev1.Pod) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events++
	if t == watch.Deleted || !p.DeletionTimestamp.IsZero() || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		delete(r.pods, p.Name)
	} else {
		r.pods[p.Name] = p
	}
	ready := 0
	hashes := map[string]bool{}
	for _, q := range r.pods {
		hashes[q.Labels[workloadsv1alpha1.PodTemplateHashLabel]] = true
		for _, c := range q.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				ready++
			}
		}
	}
	r.maxLive = max(r.maxLive, len(r.pods))
	if r.armed {
		r.minReady = min(r.minReady, ready)
		r.maxHash = max(r.maxHash, len(hashes))
	}
}

// arm starts the Ready and hash bounds (after the first rollout, when every
// Pod is Ready) and resets the maximum.
func (r *podRecorder) arm() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.armed, r.maxLive, r.maxHash = true, len(r.pods), 0
	r.minReady = 1 << 30
}

func (r *podRecorder) bounds() (maxLive, minReady, maxHashes int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.maxLive, r.minReady, r.maxHash
}

func (r *podRecorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprintf("%d events, max %d live, min %d ready, max %d templates at once", r.events, r.maxLive, r.minReady, r.maxHash)
}

const testSecond = time.Second

// caughtUp waits until the recorder has seen n live, Ready Pods, so bounds
// read afterwards cover the whole rollout.
func (r *podRecorder) caughtUp(g Gomega, n int) {
	testenv.Eventually(g, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.pods) != n {
			return false
		}
		for _, p := range r.pods {
			ready := false
			for _, c := range p.Status.Conditions {
				ready = ready || (c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue)
			}
			if !ready {
				return false
			}
		}
		return true
	}).Should(BeTrue(), "the Pod watch caught up")
}
