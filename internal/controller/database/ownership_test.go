package database_test

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
	"github.com/converge-dev/converge/internal/sqlengine"
	"github.com/converge-dev/converge/internal/sqltest"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestCrashBetweenCreateAndMarkIsCompleted: a manager that died after
// PostgreSQL's CREATE DATABASE and before its COMMENT left a database owned
// by the Database's (marked) role but unmarked itself. The same Database
// recognises it as its own, marks it and turns Ready; another Database
// naming it is refused with DatabaseNotOwned even with adoptExisting.
func TestCrashBetweenCreateAndMarkIsCompleted(t *testing.T) {
	testenv.Need(t, env)
	sqltest.Need(t, pg, sqlengine.Postgres)
	e := engines()[0]
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	// The Database exists (and has its UID) before its instance does, so
	// the test can play the crashed run on the server first.
	d := newDatabase(ns, "crashed", e.kind, "server")
	g.Expect(env.Tenant.Create(ctx, d)).To(Succeed())
	claim := sqlengine.Claim{UID: string(d.UID), Namespace: ns, Name: d.Name}
	pg.Exec(t, "",
		"CREATE ROLE crashed_owner LOGIN PASSWORD 'old'",
		"COMMENT ON ROLE crashed_owner IS '"+claim.String()+"'",
		"CREATE DATABASE crashed OWNER crashed_owner")
	createInstance(t, e, ns, "server", 0)
	waitReady(t, d)
	var comment string
	g.Expect(pg.Open(t, "").QueryRowContext(ctx, "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = 'crashed'").Scan(&comment)).To(Succeed())
	g.Expect(comment).To(Equal(claim.String()), "the missing marker was written")

	thief := newDatabase(ns, "thief", e.kind, "server")
	thief.Spec.DatabaseName, thief.Spec.Owner, thief.Spec.AdoptExisting = "crashed", "thief_owner", true
	g.Expect(env.Tenant.Create(ctx, thief)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(thief), thief)).To(Succeed())
		stalled := meta.FindStatusCondition(thief.Status.Conditions, sqlv1alpha1.StalledCondition)
		g.Expect(stalled).NotTo(BeNil())
		g.Expect(stalled.Reason).To(Equal(sqlv1alpha1.DatabaseNotOwnedReason))
		g.Expect(stalled.Message).To(ContainSubstring("belongs to Database " + ns + "/crashed"))
		// A terminal error observed the generation: kstatus (a waiting
		// Sync, Flux) reads Failed with the reason, not InProgress.
		testenv.ExpectKstatus(ctx, g, env.Client, thief, kstatus.FailedStatus, sqlv1alpha1.DatabaseNotOwnedReason)
	}).Should(Succeed())
	g.Expect(roleExists(t, pg, "thief_owner")).To(BeFalse())
}
