package rollout_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	gosync "sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadsv1alpha1 "github.com/converge-dev/converge/api/workloads/v1alpha1"
	"github.com/converge-dev/converge/internal/rollout"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

var env *testenv.Environment

// The verbs against a real API server with no workload controller running:
// the tests write the BasicReplicaSets a controller would have written, so
// every history is exactly what the test says.
func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{Manager: func(o *setup.Options) {
		o.Controllers = []string{"gitrepository"} // anything but the workload controllers
	}}, &env))
}

func template(image string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: image}}}}
}

func newDeployment(t *testing.T, ns, image string) *workloadsv1alpha1.BasicDeployment {
	d := &workloadsv1alpha1.BasicDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: workloadsv1alpha1.BasicDeploymentSpec{Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, Template: template(image)}}
	NewWithT(t).Expect(env.Client.Create(t.Context(), d)).To(Succeed())
	return d
}

// newRevision writes the BasicReplicaSet of one revision of owner (or a
// foreign one when owner is nil), its template image, change cause and
// revision annotation as given.
func newRevision(t *testing.T, ns, name, rev, cause, image string, owner *workloadsv1alpha1.BasicDeployment) {
	hash := "h-" + name
	tmpl := template(image)
	tmpl.Labels[workloadsv1alpha1.PodTemplateHashLabel] = hash
	rs := &workloadsv1alpha1.BasicReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		Annotations: map[string]string{workloadsv1alpha1.RevisionAnnotation: rev}},
		Spec: workloadsv1alpha1.BasicReplicaSetSpec{Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web", workloadsv1alpha1.PodTemplateHashLabel: hash}}, Template: tmpl}}
	if cause != "" {
		rs.Annotations[workloadsv1alpha1.ChangeCauseAnnotation] = cause
	}
	if owner != nil {
		rs.OwnerReferences = []metav1.OwnerReference{{APIVersion: workloadsv1alpha1.GroupVersion.String(), Kind: "BasicDeployment",
			Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}}
	}
	NewWithT(t).Expect(env.Client.Create(t.Context(), rs)).To(Succeed())
}

func numbers(revs []rollout.Revision) []int64 {
	out := make([]int64, 0, len(revs))
	for _, r := range revs {
		out = append(out, r.Number)
	}
	return out
}

// TestHistoryAndUndo: history lists only the deployment's own revisions
// with a readable number, oldest first; undo with no revision goes to the
// one before the latest, copies its template without the pod-template-hash
// label and its change cause; undo to the current template says so; an
// unknown revision names the ones there are; a paused deployment is
// refused; one revision alone has no history to go back to.
func TestHistoryAndUndo(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	key := client.ObjectKey{Namespace: ns, Name: "web"}
	d := newDeployment(t, ns, "nginx:1.28")

	_, err := rollout.Undo(ctx, env.Client, key, 0)
	g.Expect(err).To(MatchError(ContainSubstring("no rollout history found")))

	newRevision(t, ns, "web-2", "2", "nginx 1.28", "nginx:1.28", d)
	newRevision(t, ns, "web-10", "10", "", "nginx:1.29", d) // sorted as numbers, not strings
	newRevision(t, ns, "web-1", "1", "nginx 1.27", "nginx:1.27", d)
	newRevision(t, ns, "other-3", "3", "", "nginx:9", nil)  // not the deployment's
	newRevision(t, ns, "web-bad", "many", "", "nginx:0", d) // no number
	revs, err := rollout.History(ctx, env.Client, key)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(numbers(revs)).To(Equal([]int64{1, 2, 10}))
	g.Expect(revs[0].ChangeCause).To(Equal("nginx 1.27"))
	var b bytes.Buffer
	g.Expect(rollout.PrintHistory(&b, key, revs, 0)).To(Succeed())
	g.Expect(b.String()).To(HaveSuffix("1         nginx 1.27\n2         nginx 1.28\n10        <none>\n"))

	// The deployment runs revision 10's template.
	g.Expect(env.Client.Get(ctx, key, d)).To(Succeed())
	d.Spec.Template = template("nginx:1.29")
	g.Expect(env.Client.Update(ctx, d)).To(Succeed())

	to, err := rollout.Undo(ctx, env.Client, key, 0)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(to).To(Equal(int64(2)))
	g.Expect(env.Client.Get(ctx, key, d)).To(Succeed())
	g.Expect(d.Spec.Template.Spec.Containers[0].Image).To(Equal("nginx:1.28"))
	g.Expect(d.Spec.Template.Labels).To(Equal(map[string]string{"app": "web"}), "the pod-template-hash label was copied")
	g.Expect(d.Annotations[workloadsv1alpha1.ChangeCauseAnnotation]).To(Equal("nginx 1.28"))

	to, err = rollout.Undo(ctx, env.Client, key, 2)
	g.Expect(errors.Is(err, rollout.ErrAlreadyCurrent)).To(BeTrue(), "%v", err)
	g.Expect(to).To(Equal(int64(2)))

	_, err = rollout.Undo(ctx, env.Client, key, 7)
	g.Expect(err).To(MatchError(ContainSubstring("unable to find the specified revision 7 (have 1, 2, 10)")))

	to, err = rollout.Undo(ctx, env.Client, key, 1)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(to).To(Equal(int64(1)))
	g.Expect(env.Client.Get(ctx, key, d)).To(Succeed())
	g.Expect(d.Spec.Template.Spec.Containers[0].Image).To(Equal("nginx:1.27"))
	g.Expect(d.Annotations[workloadsv1alpha1.ChangeCauseAnnotation]).To(Equal("nginx 1.27"))

	g.Expect(rollout.SetPaused(ctx, env.Client, key, true)).To(Succeed())
	_, err = rollout.Undo(ctx, env.Client, key, 2)
	g.Expect(err).To(MatchError(ContainSubstring("is paused")))

	_, err = rollout.Undo(ctx, env.Client, client.ObjectKey{Namespace: ns, Name: "missing"}, 0)
	g.Expect(err).To(MatchError(ContainSubstring("getting BasicDeployment")))
}

// TestPauseAndResume: each is refused when the deployment already is in
// that state, as kubectl refuses it.
func TestPauseAndResume(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	key := client.ObjectKey{Namespace: ns, Name: "web"}
	newDeployment(t, ns, "nginx:1.28")
	paused := func() bool {
		d := &workloadsv1alpha1.BasicDeployment{}
		g.Expect(env.Client.Get(ctx, key, d)).To(Succeed())
		return d.Spec.Paused
	}
	g.Expect(rollout.SetPaused(ctx, env.Client, key, false)).To(MatchError(ContainSubstring("is not paused")))
	g.Expect(rollout.SetPaused(ctx, env.Client, key, true)).To(Succeed())
	g.Expect(paused()).To(BeTrue())
	g.Expect(rollout.SetPaused(ctx, env.Client, key, true)).To(MatchError(ContainSubstring("is already paused")))
	g.Expect(rollout.SetPaused(ctx, env.Client, key, false)).To(Succeed())
	g.Expect(paused()).To(BeFalse())
}

// TestStatusWaitsAndTimesOut: without watch, one line and no error; with
// watch, a line each time the message changes, nil when it completes, and
// a timeout naming the deployment when it never does.
func TestStatusWaitsAndTimesOut(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	key := client.ObjectKey{Namespace: ns, Name: "web"}
	d := newDeployment(t, ns, "nginx:1.28")
	var b bytes.Buffer
	g.Expect(rollout.Status(ctx, env.Client, key, &b, false, 0)).To(Succeed())
	g.Expect(strings.Count(b.String(), "\n")).To(Equal(1))
	g.Expect(b.String()).To(ContainSubstring("spec update to be observed"))

	b.Reset()
	err := rollout.Status(ctx, env.Client, key, &b, true, time.Second)
	g.Expect(err).To(MatchError("timed out waiting for the rollout of basicdeployment/web"))

	// What the controller would report, in two steps.
	g.Expect(env.Client.Get(ctx, key, d)).To(Succeed())
	d.Status = workloadsv1alpha1.BasicDeploymentStatus{ObservedGeneration: d.Generation, Replicas: 1, UpdatedReplicas: 1}
	g.Expect(env.Client.Status().Update(ctx, d)).To(Succeed())
	done := make(chan error, 1)
	var w safeBuffer
	go func() { done <- rollout.Status(ctx, env.Client, key, &w, true, time.Minute) }()
	testenv.Eventually(g, func(g Gomega) { g.Expect(w.String()).To(ContainSubstring("0 of 1 updated replicas are available")) }).Should(Succeed())
	d.Status.AvailableReplicas = 1
	g.Expect(env.Client.Status().Update(ctx, d)).To(Succeed())
	g.Eventually(done).WithTimeout(30 * time.Second).Should(Receive(BeNil()))
	g.Expect(w.String()).To(HaveSuffix(fmt.Sprintf("basicdeployment/%s successfully rolled out\n", d.Name)))
}

// safeBuffer is a bytes.Buffer safe to write from Status's goroutine while
// the test reads it.
type safeBuffer struct {
	mu gosync.Mutex
	b  bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestStatusTimeoutThroughAThrottledClient: when the client's rate limiter
// gives up because its wait would pass the timeout, the verb still says it
// timed out (it said "client rate limiter Wait returned an error").
func TestStatusTimeoutThroughAThrottledClient(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	newDeployment(t, ns, "nginx:1.28")
	cfg := rest.CopyConfig(env.Config)
	cfg.RateLimiter, cfg.QPS, cfg.Burst = nil, 0.2, 1 // the second GET would wait 5 s
	c, err := client.New(cfg, client.Options{Scheme: env.Client.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	key := client.ObjectKey{Namespace: ns, Name: "web"}
	// The client's discovery and this read take the bucket's tokens, so
	// Status's first read would have to wait past its 1 s timeout.
	g.Expect(c.Get(ctx, key, &workloadsv1alpha1.BasicDeployment{})).To(Succeed())
	var b bytes.Buffer
	err = rollout.Status(ctx, c, key, &b, true, time.Second)
	g.Expect(err).To(MatchError("timed out waiting for the rollout of basicdeployment/web"))
}
