package setup_test

import (
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadsv1alpha1 "github.com/converge-dev/converge/api/workloads/v1alpha1"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

var env *testenv.Environment

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{}, &env))
}

func replicaSet(ns, name string, labels map[string]string) *workloadsv1alpha1.BasicReplicaSet {
	return &workloadsv1alpha1.BasicReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: workloadsv1alpha1.BasicReplicaSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}},
			},
		},
	}
}

// TestWebhooksServeThroughTheAPIServer proves the webhook plumbing end to
// end: the API server calls the manager's webhook server over TLS with the
// injected CA, which defaults and validates.
func TestWebhooksServeThroughTheAPIServer(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)

	rs := replicaSet(ns, "defaulted", nil)
	g.Expect(env.Client.Create(t.Context(), rs)).To(Succeed())
	g.Expect(rs.Spec.Replicas).To(Equal(ptr.To[int32](1)), "the mutating webhook defaults replicas")

	bad := replicaSet(ns, "bad", nil)
	bad.Spec.Template.Labels = map[string]string{"app": "other"}
	err := env.Client.Create(t.Context(), bad)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(ContainSubstring(`must match the selector "app=bad"`))

	// A merge patch carries no resourceVersion, so the controller's status
	// writes cannot turn this into a conflict: only admission can refuse it.
	base := rs.DeepCopy()
	rs.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "defaulted", "x": "y"}}
	rs.Spec.Template.Labels["x"] = "y"
	err = env.Client.Patch(t.Context(), rs, client.MergeFrom(base))
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(ContainSubstring("spec.selector: Invalid value"))
	g.Expect(err.Error()).To(ContainSubstring("field is immutable"))
}

// TestShardKeySelectsObjects: the shared manager has no shard key, so it
// reconciles only objects without the shard label.
func TestShardKeySelectsObjects(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)

	mine := replicaSet(ns, "mine", nil)
	theirs := replicaSet(ns, "theirs", map[string]string{setup.ShardLabel: "shard-a"})
	g.Expect(env.Client.Create(t.Context(), mine)).To(Succeed())
	g.Expect(env.Client.Create(t.Context(), theirs)).To(Succeed())

	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(mine), mine)).To(Succeed())
		g.Expect(mine.Status.ObservedGeneration).To(Equal(mine.Generation))
	}).Should(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(theirs), theirs)).To(Succeed())
		// -1 is the CRD default: no controller ever wrote the status.
		g.Expect(theirs.Status.ObservedGeneration).To(BeNumerically("<=", 0), "another shard's object is not reconciled")
		g.Expect(theirs.Status.Conditions).To(BeEmpty(), "another shard's object is not reconciled")
	}).WithTimeout(2 * time.Second).Should(Succeed())
}

// TestStoppedManagerNeverBlocksCoreWrites: the webhook configurations are
// scoped to Converge's API groups, so with the manager down every core write
// still works, while Converge kinds are refused (failurePolicy Fail).
func TestStoppedManagerNeverBlocksCoreWrites(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	own, err := testenv.Start(t.Context(), testenv.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = own.Stop() })
	g.Expect(own.Platform.StopManager()).To(Succeed())

	c := own.Client
	ctx := t.Context()
	g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "core"}})).To(Succeed())
	g.Expect(c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "core", Name: "cm"}, Data: map[string]string{"k": "v"}})).To(Succeed())
	g.Expect(c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "core", Name: "s"}, StringData: map[string]string{"k": "v"}})).To(Succeed())
	g.Expect(c.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "core", Name: "p"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}})).To(Succeed())
	g.Expect(c.Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "core", Name: "d"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "d"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "d"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}},
		}})).To(Succeed())
	g.Expect(c.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "core", Name: "cm"}})).To(Succeed())

	err = c.Create(ctx, replicaSet("core", "blocked", nil))
	g.Expect(err).To(HaveOccurred(), "Converge kinds still go through their (now unreachable) webhooks")
	g.Expect(err.Error()).To(ContainSubstring("failed calling webhook"))
}
