package sql

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
)

func TestValidateDatabaseSpec(t *testing.T) {
	ref := sqlv1alpha1.InstanceReference{APIVersion: "sql.converge.dev/v1alpha1", Kind: "PostgresInstance", Name: "pg"}
	cases := []struct {
		name string
		meta string
		spec sqlv1alpha1.DatabaseSpec
		want string // empty: valid
	}{
		{"defaults from metadata.name", "orders", sqlv1alpha1.DatabaseSpec{InstanceRef: ref}, ""},
		{"third-party kind", "orders", sqlv1alpha1.DatabaseSpec{InstanceRef: sqlv1alpha1.InstanceReference{APIVersion: "example.com/v1", Kind: "CockroachInstance", Name: "c"}, Extensions: []string{"x"}}, ""},
		{"injection", "orders", sqlv1alpha1.DatabaseSpec{InstanceRef: ref, DatabaseName: "a'; DROP TABLE x; --"}, "looks like SQL"},
		{"uppercase", "orders", sqlv1alpha1.DatabaseSpec{InstanceRef: ref, Owner: "Admin"}, "spec.owner"},
		{"dot in metadata.name", "a.b", sqlv1alpha1.DatabaseSpec{InstanceRef: ref}, "set spec.databaseName"},
		{"charset", "orders", sqlv1alpha1.DatabaseSpec{InstanceRef: ref, Charset: "utf8; DROP"}, "spec.charset"},
		{"mariadb extensions", "orders", sqlv1alpha1.DatabaseSpec{InstanceRef: sqlv1alpha1.InstanceReference{APIVersion: "sql.converge.dev/v1alpha1", Kind: "MariaDBInstance", Name: "m"}, Extensions: []string{"hstore"}}, "PostgreSQL feature"},
		{"unknown built-in kind", "orders", sqlv1alpha1.DatabaseSpec{InstanceRef: sqlv1alpha1.InstanceReference{APIVersion: "sql.converge.dev/v1alpha1", Kind: "OracleInstance", Name: "o"}}, "Unsupported value"},
		{"bad apiVersion", "orders", sqlv1alpha1.DatabaseSpec{InstanceRef: sqlv1alpha1.InstanceReference{APIVersion: "a/b/c", Kind: "X", Name: "o"}}, "group/version"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			errs := ValidateDatabaseSpec(c.meta, &c.spec, field.NewPath("spec"))
			if c.want == "" {
				if len(errs) > 0 {
					t.Fatalf("unexpected errors: %v", errs)
				}
				return
			}
			if !strings.Contains(errs.ToAggregate().Error(), c.want) {
				t.Fatalf("errors %v do not mention %q", errs, c.want)
			}
		})
	}
}

func TestDefaultOwnerFitsTheLimit(t *testing.T) {
	long := strings.Repeat("a", 63)
	if got := defaultOwner(long); len(got) != 63 || !strings.HasSuffix(got, "_owner") {
		t.Fatalf("defaultOwner = %q", got)
	}
}
