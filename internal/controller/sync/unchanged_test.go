package sync_test

import (
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	syncctrl "github.com/converge-dev/converge/internal/controller/sync"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestUnchangedSyncWritesNoStatus: reconciling a Ready Sync whose revision
// and objects did not change (render, apply dry-run comparison, prune
// check each time) sends no status write. Not parallel: the status writes
// are counted on the whole API server.
func TestUnchangedSyncWritesNoStatus(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	_, h1, _ := setupRepo(t, ns, map[string]string{"deploy/a.yaml": configMap("a", map[string]string{"v": "1"})})
	g.Expect(env.Client.Create(t.Context(), newSync(ns, "quiet", "app", "deploy", true))).To(Succeed())
	sy := waitApplied(t, g, ns, "quiet", h1)

	writes, reconciles := env.UnchangedReconciles(t, g, syncctrl.ControllerName, "syncs", sy, 3)
	t.Logf("Sync at rest: %.0f status writes in %.0f reconciles", writes, reconciles)
	g.Expect(reconciles).To(BeNumerically(">=", 3))
	// Exact for this object (the API server's count is for the whole
	// resource, and objects of earlier tests may still be written): its
	// resourceVersion is the one the last annotation patch returned.
	rv := sy.ResourceVersion
	g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(sy), sy)).To(Succeed())
	g.Expect(sy.ResourceVersion).To(Equal(rv), "the Sync was written after the last annotation (%.0f status writes of the resource in the window)", writes)
}
