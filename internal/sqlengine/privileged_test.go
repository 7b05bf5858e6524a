package sqlengine_test

import (
	"testing"

	"github.com/converge-dev/converge/internal/sqlengine"
	"github.com/converge-dev/converge/internal/sqltest"
)

// TestPrivilegedRoleMemberships: on PostgreSQL, membership makes a role
// privileged only through a role with privileged attributes, a predefined
// pg_* role or the admin user; membership in a plain role does not.
func TestPrivilegedRoleMemberships(t *testing.T) {
	srv := pg
	sqltest.Need(t, srv, sqlengine.Postgres)
	ctx := t.Context()
	var pools sqlengine.Pools
	defer pools.Close()
	admin, err := pools.Admin(srv.Admin())
	if err != nil {
		t.Fatal(err)
	}
	srv.Exec(t, "",
		"CREATE ROLE priv_plain NOLOGIN", "CREATE ROLE priv_member LOGIN", "GRANT priv_plain TO priv_member")
	cases := []struct {
		role, admin, want string
	}{
		{"priv_member", srv.AdminUser, ""},
		{"priv_plain", srv.AdminUser, ""},
		// priv_plain standing in for the admin user: a member of the admin
		// is privileged, though the admin has no attribute.
		{"priv_member", "priv_plain", `role "priv_member" is a member of "priv_plain"`},
		{"priv_plain", "priv_plain", `"priv_plain" is the instance's admin user`},
	}
	for _, tc := range cases {
		if why, err := admin.PrivilegedRole(ctx, tc.role, tc.admin); err != nil || why != tc.want {
			t.Errorf("PrivilegedRole(%s, admin %s) = %q, %v; want %q", tc.role, tc.admin, why, err, tc.want)
		}
	}
}
