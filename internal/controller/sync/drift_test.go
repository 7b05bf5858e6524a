package sync_test

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestDriftIsCorrectedAndAttributed: another field manager edits and then
// deletes an applied object; a watch brings the Sync back at once (the
// interval is an hour) and it restores the object, recording who changed
// which field.
func TestDriftIsCorrectedAndAttributed(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	_, h1, _ := setupRepo(t, ns, map[string]string{"app/cm.yaml": configMap("cfg", map[string]string{"key": "git"})})
	sy := newSync(ns, "app", "app", "app", true)
	sy.Spec.Interval = &metav1.Duration{Duration: 3600e9}
	g.Expect(env.Client.Create(t.Context(), sy)).To(Succeed())
	waitApplied(t, g, ns, "app", h1)

	cm, err := getCM(t, ns, "cfg")
	g.Expect(err).NotTo(HaveOccurred())
	cm.Data["key"] = "edited"
	g.Expect(env.Client.Update(t.Context(), cm, client.FieldOwner("intruder"))).To(Succeed())
	expectCM(t, g, ns, "cfg", map[string]string{"key": "git"})
	testenv.Eventually(g, func(g Gomega) {
		s := getSync(g, t, ns, "app")
		g.Expect(s.Status.Drift).NotTo(BeNil())
		g.Expect(s.Status.Drift.Objects).NotTo(BeEmpty())
		d := s.Status.Drift.Objects[0]
		g.Expect(d.Object.Name).To(Equal("cfg"))
		g.Expect(d.Action).To(Equal("Corrected"))
		g.Expect(d.FieldManagers).To(ContainElement("intruder"))
		g.Expect(d.Fields).To(ContainElement(".data.key"))
	}).Should(Succeed())

	// Metrics (the manager runs in this process) and an Event say the same.
	g.Expect(driftCount(g, ns, "app", "Corrected")).To(BeNumerically(">=", 1))
	testenv.Eventually(g, func(g Gomega) {
		evs := &eventsv1.EventList{}
		g.Expect(env.Client.List(t.Context(), evs, client.InNamespace(ns))).To(Succeed())
		var reasons []string
		for _, e := range evs.Items {
			reasons = append(reasons, e.Reason)
		}
		g.Expect(reasons).To(ContainElements("ApplySucceeded", "DriftDetected"))
	}).Should(Succeed())

	g.Expect(env.Client.Delete(t.Context(), cm)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		got, err := getCM(t, ns, "cfg")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got.UID).NotTo(Equal(cm.UID), "recreated")
		g.Expect(got.Data).To(Equal(map[string]string{"key": "git"}))
	}).Should(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		s := getSync(g, t, ns, "app")
		g.Expect(s.Status.Drift.Objects[0].FieldManagers).To(Equal([]string{"(deleted)"}))
		g.Expect(s.Status.Drift.Count).To(BeNumerically(">=", 2))
	}).Should(Succeed())
}

// TestDriftIsOnlyReported: with driftPolicy Report the edit stays and is
// recorded.
func TestDriftIsOnlyReported(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	_, h1, _ := setupRepo(t, ns, map[string]string{"app/cm.yaml": configMap("cfg", map[string]string{"key": "git"})})
	sy := newSync(ns, "app", "app", "app", true)
	sy.Spec.DriftPolicy = gitopsv1alpha1.DriftPolicyReport
	g.Expect(env.Client.Create(t.Context(), sy)).To(Succeed())
	waitApplied(t, g, ns, "app", h1)

	cm, err := getCM(t, ns, "cfg")
	g.Expect(err).NotTo(HaveOccurred())
	cm.Data["key"] = "edited"
	g.Expect(env.Client.Update(t.Context(), cm, client.FieldOwner("intruder"))).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		s := getSync(g, t, ns, "app")
		g.Expect(s.Status.Drift).NotTo(BeNil())
		g.Expect(s.Status.Drift.Objects).NotTo(BeEmpty())
		g.Expect(s.Status.Drift.Objects[0].Action).To(Equal("Reported"))
		g.Expect(s.Status.Drift.Objects[0].FieldManagers).To(ContainElement("intruder"))
	}).Should(Succeed())
	g.Expect(driftCount(g, ns, "app", "Reported")).To(BeNumerically(">=", 1))
	g.Expect(driftCount(g, ns, "app", "Corrected")).To(BeZero())
	// Another reconcile, waited for, still leaves it.
	reported := driftCount(g, ns, "app", "Reported")
	requestReconcile(t, sy)
	testenv.Eventually(g, func(g Gomega) {
		s := getSync(g, t, ns, "app")
		g.Expect(s.Status.LastHandledReconcileAt).To(Equal(sy.Annotations[gitopsv1alpha1.ReconcileRequestAnnotation]))
		g.Expect(s.Status.ObservedGeneration).To(Equal(s.Generation))
	}).Should(Succeed())
	got := &corev1.ConfigMap{}
	g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(cm), got)).To(Succeed())
	g.Expect(got.Data["key"]).To(Equal("edited"), "driftPolicy Report never corrects")
	g.Expect(got.ResourceVersion).To(Equal(cm.ResourceVersion), "nothing wrote the object")
	g.Expect(driftCount(g, ns, "app", "Corrected")).To(BeZero())
	g.Expect(driftCount(g, ns, "app", "Reported")).To(BeNumerically(">=", reported))
}

// driftCount reads converge_sync_drift_total from the in-process registry.
func driftCount(g Gomega, ns, name, action string) float64 {
	mfs, err := metrics.Registry.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	for _, mf := range mfs {
		if mf.GetName() != "converge_sync_drift_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["namespace"] == ns && l["name"] == name && l["action"] == action {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
