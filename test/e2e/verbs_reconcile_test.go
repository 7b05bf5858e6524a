package e2e

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/converge-dev/converge/internal/sqltest"
)

// TestReconcileDatabaseThroughTheBinary: `converge reconcile` asks for a
// reconcile of every kind whose controller honours the request, not only
// the gitops kinds (verbsSuccess walks those): a Database on a real
// PostgreSQL, named as KIND/NAME and as KIND NAME, prints the same
// "requested" line and waits until the controller recorded the request
// (status.lastHandledReconcileAt), then prints the Ready message. A kind
// whose controller does not honour it is refused, naming the kinds that do.
func TestReconcileDatabaseThroughTheBinary(t *testing.T) {
	g := NewWithT(t)
	e := setup(t)
	pg, err := sqltest.StartPostgres(t.Context())
	if err != nil {
		var me *sqltest.MissingError
		if errors.As(err, &me) && os.Getenv("CI") == "" {
			t.Skipf("*** SKIPPING: %v ***", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop() })
	p := e.start(t)
	p.waitReady(t)
	kc := filepath.Join(e.dataDir, "kubeconfig")
	out, err := e.kubectl(t, "create", "namespace", "verbs")
	g.Expect(err).NotTo(HaveOccurred(), out)
	f := filepath.Join(t.TempDir(), "db.yaml")
	g.Expect(os.WriteFile(f, fmt.Appendf(nil, `apiVersion: v1
kind: Secret
metadata: {name: pg-admin}
stringData: {username: %q, password: %q}
---
apiVersion: sql.converge.dev/v1alpha1
kind: PostgresInstance
metadata: {name: pg}
spec:
  host: 127.0.0.1
  port: %d
  adminSecretRef: {name: pg-admin}
---
apiVersion: sql.converge.dev/v1alpha1
kind: Database
metadata: {name: orders}
spec:
  instanceRef: {apiVersion: sql.converge.dev/v1alpha1, kind: PostgresInstance, name: pg}
  deletionPolicy: Retain
`, pg.AdminUser, pg.AdminPassword, pg.Port), 0o600)).To(Succeed())
	out, err = e.kubectl(t, "-n", "verbs", "apply", "-f", f)
	g.Expect(err).NotTo(HaveOccurred(), out)
	out, err = e.kubectl(t, "-n", "verbs", "wait", "--for=condition=Ready", "database/orders", "--timeout=2m")
	g.Expect(err).NotTo(HaveOccurred(), out)

	cv := func(args ...string) (string, int) {
		return e.run(t, append(args, "--kubeconfig", kc, "-n", "verbs")...)
	}
	for _, args := range [][]string{{"reconcile", "database/orders"}, {"reconcile", "sqldb", "orders"}} {
		out, code := cv(args...)
		g.Expect(code).To(Equal(0), "converge %v:\n%s", args, out)
		g.Expect(out).To(ContainSubstring("► reconcile of database verbs/orders requested"))
		g.Expect(out).To(MatchRegexp(`(?m)^✔ `), "waited for the handled request and printed Ready")
		requested, err := e.kubectl(t, "-n", "verbs", "get", "database", "orders", "-o", `jsonpath={.metadata.annotations.converge\.dev/reconcile-requested-at}`)
		g.Expect(err).NotTo(HaveOccurred(), requested)
		handled, err := e.kubectl(t, "-n", "verbs", "get", "database", "orders", "-o", "jsonpath={.status.lastHandledReconcileAt}")
		g.Expect(err).NotTo(HaveOccurred(), handled)
		g.Expect(strings.TrimSpace(requested)).NotTo(BeEmpty())
		g.Expect(handled).To(Equal(requested), "the verb returned once the controller handled this request")
	}
	// Without waiting: only the request.
	out, code := cv("reconcile", "database/orders", "--timeout", "0")
	g.Expect(code).To(Equal(0), out)
	g.Expect(out).To(Equal("► reconcile of database verbs/orders requested\n"))

	out, code = cv("reconcile", "postgresinstance/pg")
	g.Expect(code).To(Equal(1), out)
	g.Expect(out).To(ContainSubstring("postgresinstance cannot be asked to reconcile: want one of sync, gitrepository, database"))
	out, code = cv("reconcile", "database/missing")
	g.Expect(code).To(Equal(1), out)
	g.Expect(out).To(ContainSubstring("not found"))
}
