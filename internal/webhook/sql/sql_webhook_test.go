package sql

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
)

var pgRef = sqlv1alpha1.InstanceReference{APIVersion: "sql.converge.dev/v1alpha1", Kind: "PostgresInstance", Name: "pg"}

// TestValidateDatabaseSpecFields: one field wrong at a time, each refusal
// naming it, and the valid neighbours of each guard.
func TestValidateDatabaseSpecFields(t *testing.T) {
	mariaRef := sqlv1alpha1.InstanceReference{APIVersion: "sql.converge.dev/v1alpha1", Kind: "MariaDBInstance", Name: "m"}
	cases := []struct {
		name string
		spec sqlv1alpha1.DatabaseSpec
		want string // empty: valid
		not  string // must not appear
	}{
		{"all set", sqlv1alpha1.DatabaseSpec{InstanceRef: pgRef, DatabaseName: "orders", Owner: "app", Charset: "UTF8", Extensions: []string{"hstore"}, ConnectionSecret: "orders-db"}, "", ""},
		{"mariadb without extensions", sqlv1alpha1.DatabaseSpec{InstanceRef: mariaRef}, "", ""},
		{"third-party MariaDBInstance with extensions", sqlv1alpha1.DatabaseSpec{InstanceRef: sqlv1alpha1.InstanceReference{APIVersion: "example.com/v1", Kind: "MariaDBInstance", Name: "m"}, Extensions: []string{"x"}}, "", ""},
		{"bad databaseName", sqlv1alpha1.DatabaseSpec{InstanceRef: pgRef, DatabaseName: "Orders"}, "spec.databaseName", "defaults to metadata.name"},
		{"bad extension", sqlv1alpha1.DatabaseSpec{InstanceRef: pgRef, Extensions: []string{"ok", "Bad"}}, "spec.extensions[1]", ""},
		{"empty apiVersion", sqlv1alpha1.DatabaseSpec{InstanceRef: sqlv1alpha1.InstanceReference{Kind: "PostgresInstance", Name: "pg"}}, "spec.instanceRef.apiVersion", ""},
		{"bad instance name", sqlv1alpha1.DatabaseSpec{InstanceRef: sqlv1alpha1.InstanceReference{APIVersion: "sql.converge.dev/v1alpha1", Kind: "PostgresInstance", Name: "PG"}}, "spec.instanceRef.name", ""},
		{"bad connectionSecret", sqlv1alpha1.DatabaseSpec{InstanceRef: pgRef, ConnectionSecret: "Orders_DB"}, "spec.connectionSecret", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			msg := ValidateDatabaseSpec("orders", &c.spec, field.NewPath("spec")).ToAggregate()
			switch {
			case c.want == "" && msg != nil:
				t.Fatalf("unexpected errors: %v", msg)
			case c.want != "" && (msg == nil || !strings.Contains(msg.Error(), c.want)):
				t.Fatalf("errors %v do not mention %q", msg, c.want)
			case c.not != "" && strings.Contains(msg.Error(), c.not):
				t.Fatalf("errors %v mention %q", msg, c.not)
			}
		})
	}
}

// TestDatabaseDefault: the name, owner, policy and Secret are filled from
// metadata.name, only when valid, and given values are kept.
func TestDatabaseDefault(t *testing.T) {
	d := &sqlv1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Name: "orders"}}
	if err := (Database{}).Default(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if s := d.Spec; s.DatabaseName != "orders" || s.Owner != "orders_owner" || s.DeletionPolicy != sqlv1alpha1.DeletionRetain || s.ConnectionSecret != "orders-connection" {
		t.Fatalf("defaults: %+v", s)
	}
	d = &sqlv1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Name: "a.b"}}
	_ = (Database{}).Default(context.Background(), d)
	if s := d.Spec; s.DatabaseName != "" || s.Owner != "" {
		t.Fatalf("an invalid metadata.name was copied: %+v", s)
	}
	d = &sqlv1alpha1.Database{Spec: sqlv1alpha1.DatabaseSpec{DatabaseName: "shop", Owner: "app", DeletionPolicy: sqlv1alpha1.DeletionDelete, ConnectionSecret: "s"}}
	_ = (Database{}).Default(context.Background(), d)
	if s := d.Spec; s.DatabaseName != "shop" || s.Owner != "app" || s.DeletionPolicy != sqlv1alpha1.DeletionDelete || s.ConnectionSecret != "s" {
		t.Fatalf("given values changed: %+v", s)
	}
	d = &sqlv1alpha1.Database{Spec: sqlv1alpha1.DatabaseSpec{DatabaseName: "shop"}}
	_ = (Database{}).Default(context.Background(), d)
	if s := d.Spec; s.Owner != "shop_owner" || s.ConnectionSecret != "" {
		t.Fatalf("without metadata.name: %+v", s)
	}
	d = &sqlv1alpha1.Database{Spec: sqlv1alpha1.DatabaseSpec{DatabaseName: "Shop"}}
	_ = (Database{}).Default(context.Background(), d)
	if d.Spec.Owner != "" {
		t.Fatalf("owner from an invalid databaseName: %q", d.Spec.Owner)
	}
}

// TestDatabaseUpdate: the server-facing identity is immutable, each change
// refused naming its field; other changes pass.
func TestDatabaseUpdate(t *testing.T) {
	old := &sqlv1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Name: "orders"}, Spec: sqlv1alpha1.DatabaseSpec{InstanceRef: pgRef}}
	_ = (Database{}).Default(context.Background(), old)
	for _, c := range []struct {
		name   string
		mutate func(s *sqlv1alpha1.DatabaseSpec)
		want   string // empty: allowed
	}{
		{"deletionPolicy", func(s *sqlv1alpha1.DatabaseSpec) { s.DeletionPolicy = sqlv1alpha1.DeletionDelete }, ""},
		{"instanceRef", func(s *sqlv1alpha1.DatabaseSpec) { s.InstanceRef.Name = "pg2" }, "spec.instanceRef"},
		{"databaseName", func(s *sqlv1alpha1.DatabaseSpec) { s.DatabaseName = "shop" }, "spec.databaseName"},
		{"owner", func(s *sqlv1alpha1.DatabaseSpec) { s.Owner = "app" }, "spec.owner"},
		{"charset", func(s *sqlv1alpha1.DatabaseSpec) { s.Charset = "UTF8" }, "spec.charset"},
		{"restoreFrom", func(s *sqlv1alpha1.DatabaseSpec) { s.RestoreFrom = &sqlv1alpha1.LocalObjectReference{Name: "b"} }, "spec.restoreFrom"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := old.DeepCopy()
			c.mutate(&d.Spec)
			_, err := (Database{}).ValidateUpdate(context.Background(), old, d)
			if c.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want+": Invalid value") {
				t.Fatalf("error %v does not name %s", err, c.want)
			}
		})
	}
	// ValidateCreate also checks the instance kind's contract against the
	// cluster's CRDs (test/security TestDatabaseInstanceRefCannotNameASecret);
	// the spec rules it applies first accept this one.
	if errs := ValidateDatabaseSpec(old.Name, &old.Spec, field.NewPath("spec")); len(errs) > 0 {
		t.Fatalf("valid Database refused: %v", errs.ToAggregate())
	}
}

// TestInstance: the defaults per engine, and VerifyFull needs a CA.
func TestInstance(t *testing.T) {
	ctx := context.Background()
	pg := &sqlv1alpha1.PostgresInstance{Spec: sqlv1alpha1.InstanceSpec{Host: "db", AdminSecretRef: sqlv1alpha1.SecretReference{Name: "admin"}}}
	_ = (PostgresInstance{}).Default(ctx, pg)
	if s := pg.Spec; s.Port != 5432 || s.MaxConnections != 4 || s.TLS == nil || s.TLS.Mode != sqlv1alpha1.TLSRequire {
		t.Fatalf("postgres defaults: %+v", s)
	}
	my := &sqlv1alpha1.MariaDBInstance{Spec: sqlv1alpha1.InstanceSpec{Port: 3307, MaxConnections: 9, TLS: &sqlv1alpha1.InstanceTLS{Mode: sqlv1alpha1.TLSVerifyFull}}}
	_ = (MariaDBInstance{}).Default(ctx, my)
	if s := my.Spec; s.Port != 3307 || s.MaxConnections != 9 || s.TLS.Mode != sqlv1alpha1.TLSVerifyFull {
		t.Fatalf("given values changed: %+v", s)
	}
	my = &sqlv1alpha1.MariaDBInstance{}
	_ = (MariaDBInstance{}).Default(ctx, my)
	if my.Spec.Port != 3306 {
		t.Fatalf("mariadb port: %d", my.Spec.Port)
	}

	if _, err := (PostgresInstance{}).ValidateCreate(ctx, pg); err != nil {
		t.Fatalf("valid instance refused: %v", err)
	}
	full := pg.DeepCopy()
	full.Spec.TLS.Mode = sqlv1alpha1.TLSVerifyFull
	if _, err := (PostgresInstance{}).ValidateUpdate(ctx, pg, full); err == nil || !strings.Contains(err.Error(), "spec.tls.caSecretRef") {
		t.Fatalf("VerifyFull without a CA: %v", err)
	}
	full.Spec.TLS.CASecretRef = &sqlv1alpha1.SecretReference{Name: "ca"}
	if _, err := (PostgresInstance{}).ValidateUpdate(ctx, pg, full); err != nil {
		t.Fatalf("VerifyFull with a CA refused: %v", err)
	}
	bad := &sqlv1alpha1.MariaDBInstance{Spec: sqlv1alpha1.InstanceSpec{AdminSecretRef: sqlv1alpha1.SecretReference{Name: "Admin"}}}
	if _, err := (MariaDBInstance{}).ValidateCreate(ctx, bad); err == nil || !strings.Contains(err.Error(), "spec.adminSecretRef.name") {
		t.Fatalf("bad adminSecretRef: %v", err)
	}
	bad.Spec.TLS = &sqlv1alpha1.InstanceTLS{Mode: sqlv1alpha1.TLSRequire}
	bad.Spec.AdminSecretRef.Name = "admin"
	if _, err := (MariaDBInstance{}).ValidateUpdate(ctx, bad, bad); err != nil {
		t.Fatalf("valid instance refused: %v", err)
	}
}
