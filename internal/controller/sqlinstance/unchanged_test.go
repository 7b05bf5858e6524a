package sqlinstance_test

import (
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/internal/controller/sqlinstance"
	"github.com/converge-dev/converge/internal/sqlengine"
	"github.com/converge-dev/converge/internal/sqltest"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestUnchangedInstanceWritesNoStatus: reconciling a Ready instance whose
// server did not change (a login and SELECT 1 each time) sends no status
// write.
func TestUnchangedInstanceWritesNoStatus(t *testing.T) {
	testenv.Need(t, env)
	sqltest.Need(t, pg, sqlengine.Postgres)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	g.Expect(env.Client.Create(t.Context(), adminSecret(ns, "quiet-admin", pg.AdminUser, pg.AdminPassword))).To(Succeed())
	inst := newInstance(pg, ns, "quiet", "quiet-admin", pg.Port)
	g.Expect(env.Client.Create(t.Context(), inst)).To(Succeed())
	expectReady(t, inst)

	writes, reconciles := env.UnchangedReconciles(t, g, sqlinstance.PostgresControllerName, "postgresinstances", inst, 3)
	t.Logf("PostgresInstance at rest: %.0f status writes in %.0f reconciles", writes, reconciles)
	g.Expect(reconciles).To(BeNumerically(">=", 3))
	// Exact for this object (the API server's count is for the whole
	// resource, and objects of earlier tests may still be written): its
	// resourceVersion is the one the last annotation patch returned.
	rv := inst.GetResourceVersion()
	g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(inst), inst)).To(Succeed())
	g.Expect(inst.GetResourceVersion()).To(Equal(rv), "the instance was written after the last annotation (%.0f status writes of the resource in the window)", writes)
}
