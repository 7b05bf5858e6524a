package database_test

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
	"github.com/converge-dev/converge/internal/controller/database"
	"github.com/converge-dev/converge/internal/sqltest"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestUnchangedDatabaseWritesNoStatus: reconciling a Ready Database whose
// server did not change (a full observation each time) sends no status
// write: the status patcher sends nothing when nothing changed.
func TestUnchangedDatabaseWritesNoStatus(t *testing.T) {
	testenv.Need(t, env)
	e := engines()[0]
	sqltest.Need(t, e.srv, "postgres")
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	createInstance(t, e, ns, "server", 0)
	d := newDatabase(ns, "quiet", e.kind, "server")
	g.Expect(env.Tenant.Create(t.Context(), d)).To(Succeed())
	waitReady(t, d)

	writes, reconciles := env.UnchangedReconciles(t, g, database.ControllerName, "databases", d, 3)
	t.Logf("Database at rest: %.0f status writes in %.0f reconciles", writes, reconciles)
	g.Expect(reconciles).To(BeNumerically(">=", 3))
	// Exact for this object (the API server's count is for every Database,
	// and Databases of earlier tests may still be deleted): its
	// resourceVersion is the one the last annotation patch returned.
	rv := d.ResourceVersion
	g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(d), d)).To(Succeed())
	g.Expect(d.ResourceVersion).To(Equal(rv), "the Database's status was written after the last annotation (%.0f status writes in the window)", writes)
	g.Expect(d.Status.Conditions).To(ContainElement(HaveField("Type", sqlv1alpha1.ReadyCondition)))
}

// TestRequestedReconcileIsMarked: a reconcile requested with
// converge.dev/reconcile-requested-at on a Database at rest finds nothing to
// change, and still leaves status.lastHandledReconcileAt at the annotation's
// value (the mark a script or `converge reconcile` waits for).
func TestRequestedReconcileIsMarked(t *testing.T) {
	testenv.Need(t, env)
	e := engines()[0]
	sqltest.Need(t, e.srv, "postgres")
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	createInstance(t, e, ns, "server", 0)
	d := newDatabase(ns, "marked", e.kind, "server")
	g.Expect(env.Tenant.Create(t.Context(), d)).To(Succeed())
	waitReady(t, d)
	for range 2 {
		requestReconcile(t, d)
		want := d.Annotations[sqlv1alpha1.ReconcileRequestedAtAnnotation]
		testenv.Eventually(g, func(g Gomega) {
			g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(d), d)).To(Succeed())
			g.Expect(d.Status.LastHandledReconcileAt).To(Equal(want))
		}).Should(Succeed())
		g.Expect(d.Status.Conditions).To(ContainElement(And(HaveField("Type", sqlv1alpha1.ReadyCondition), HaveField("Status", metav1.ConditionTrue))))
	}
}
