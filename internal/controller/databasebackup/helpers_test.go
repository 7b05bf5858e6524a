package databasebackup_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	backupv1alpha1 "github.com/converge-dev/converge/api/backup/v1alpha1"
	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
	"github.com/converge-dev/converge/internal/sqlengine"
	"github.com/converge-dev/converge/internal/sqltest"
	"github.com/converge-dev/converge/internal/testenv"
)

type engineCase struct {
	name string
	srv  *sqltest.Server
	kind string
}

func engines() []engineCase {
	return []engineCase{{"postgres", pg, "PostgresInstance"}, {"mariadb", maria, "MariaDBInstance"}}
}

func createInstance(t *testing.T, e engineCase, ns string) {
	t.Helper()
	g := NewWithT(t)
	ctx := t.Context()
	g.Expect(env.Tenant.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "admin"},
		StringData: map[string]string{"username": e.srv.AdminUser, "password": e.srv.AdminPassword}})).To(Succeed())
	spec := sqlv1alpha1.InstanceSpec{Host: e.srv.Host, Port: int32(e.srv.Port), AdminSecretRef: sqlv1alpha1.SecretReference{Name: "admin"}}
	var obj client.Object = &sqlv1alpha1.PostgresInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "server"}, Spec: spec}
	if e.srv.Engine == sqlengine.MariaDB {
		obj = &sqlv1alpha1.MariaDBInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "server"}, Spec: spec}
	}
	g.Expect(env.Tenant.Create(ctx, obj)).To(Succeed())
}

// newDatabase is a Database with deletionPolicy Delete that asks for a
// backup before delete.
func newDatabase(ns, name, dbName string, e engineCase) *sqlv1alpha1.Database {
	return &sqlv1alpha1.Database{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{backupv1alpha1.BeforeDeleteAnnotation: "true"}},
		Spec: sqlv1alpha1.DatabaseSpec{
			InstanceRef:    sqlv1alpha1.InstanceReference{APIVersion: sqlv1alpha1.GroupVersion.String(), Kind: e.kind, Name: "server"},
			DatabaseName:   dbName,
			DeletionPolicy: sqlv1alpha1.DeletionDelete,
		},
	}
}

func waitReady(t *testing.T, d *sqlv1alpha1.Database) {
	t.Helper()
	g := NewWithT(t)
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(d), d)).To(Succeed())
		c := meta.FindStatusCondition(d.Status.Conditions, sqlv1alpha1.ReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue), "%s: %s", c.Reason, c.Message)
	}).WithTimeout(60 * time.Second).Should(Succeed())
}

func waitGone(t *testing.T, d *sqlv1alpha1.Database) {
	t.Helper()
	g := NewWithT(t)
	testenv.Eventually(g, func(g Gomega) {
		err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(d), &sqlv1alpha1.Database{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "still there: %v", err)
	}).WithTimeout(60 * time.Second).Should(Succeed())
}

// fill creates a table with rows, as the owner, through the connection
// Secret.
func fill(t *testing.T, e engineCase, d *sqlv1alpha1.Database, rows int) {
	t.Helper()
	sec := secret(t, d)
	db, err := sqlengine.OpenDB(e.srv.Config(sec["username"], sec["password"], sec["database"]))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	stmts := []string{"CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(64), price DECIMAL(10,2))"}
	var vals []string
	for i := 1; i <= rows; i++ {
		vals = append(vals, fmt.Sprintf("(%d, 'item-%d ''quoted''', %d.%02d)", i, i, i*3, i%100))
	}
	stmts = append(stmts, "INSERT INTO items VALUES "+strings.Join(vals, ", "))
	for _, s := range stmts {
		if _, err := db.ExecContext(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
}

// checksum is the MD5 of every row of items, in id order.
func checksum(t *testing.T, e engineCase, dbName string) string {
	t.Helper()
	q := "SELECT md5(string_agg(id || ':' || name || ':' || price, ',' ORDER BY id)) FROM items"
	if e.srv.Engine == sqlengine.MariaDB {
		q = "SELECT MD5(GROUP_CONCAT(id, ':', name, ':', price ORDER BY id SEPARATOR ',')) FROM items"
	}
	var sum string
	if err := e.srv.Open(t, dbName).QueryRowContext(t.Context(), q).Scan(&sum); err != nil {
		t.Fatal(err)
	}
	return sum
}

func secret(t *testing.T, d *sqlv1alpha1.Database) map[string]string {
	t.Helper()
	sec := &corev1.Secret{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: d.Namespace, Name: d.Name + "-connection"}, sec); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for k, v := range sec.Data {
		out[k] = string(v)
	}
	return out
}

func dbExists(t *testing.T, srv *sqltest.Server, name string) bool {
	t.Helper()
	var n int
	q := "SELECT COUNT(*) FROM pg_database WHERE datname = $1"
	if srv.Engine == sqlengine.MariaDB {
		q = "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?"
	}
	if err := srv.Open(t, "").QueryRowContext(t.Context(), q, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

func hasEvent(t *testing.T, ns, reason, substr string) bool {
	t.Helper()
	evs := &corev1.EventList{}
	if err := env.Client.List(t.Context(), evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs.Items {
		if ev.Reason == reason && strings.Contains(ev.Message, substr) {
			return true
		}
	}
	return false
}

func backups(t *testing.T, ns string) []backupv1alpha1.DatabaseBackup {
	t.Helper()
	list := &backupv1alpha1.DatabaseBackupList{}
	if err := env.Client.List(t.Context(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return list.Items
}
