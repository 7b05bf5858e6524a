package sqlengine_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/converge-dev/converge/internal/sqlengine"
	"github.com/converge-dev/converge/internal/sqltest"
)

func TestParseClaim(t *testing.T) {
	c := sqlengine.Claim{UID: "0b6f2c1e-aaaa-bbbb-cccc-1234567890ab", Namespace: "team-a", Name: "orders"}
	got, ok := sqlengine.ParseClaim(c.String())
	if !ok || got != c {
		t.Fatalf("ParseClaim(%q) = %+v, %v", c.String(), got, ok)
	}
	for _, s := range []string{"", "orders of team a", "converge.dev/owner uid=x database=a", "converge.dev/owner uid=x'; DROP database=a/b"} {
		if _, ok := sqlengine.ParseClaim(s); ok {
			t.Errorf("ParseClaim(%q) accepted a foreign comment", s)
		}
	}
}

// TestOwnershipMarkers: objects created with a claim carry it on the
// server; objects created by anyone else carry none; a PostgreSQL database
// whose COMMENT was lost (a crash after CREATE DATABASE) is still
// recognised through its owner role; a MariaDB claim written before a crash
// prevented CREATE USER is completed by its owner only; the server, not a
// list of names, says which roles are privileged.
func TestOwnershipMarkers(t *testing.T) {
	for name, srv := range servers(t) {
		t.Run(name, func(t *testing.T) {
			sqltest.Need(t, srv, sqlengine.Engine(name))
			ctx := t.Context()
			var pools sqlengine.Pools
			defer pools.Close()
			admin, err := pools.Admin(srv.Admin())
			if err != nil {
				t.Fatal(err)
			}
			mine := sqlengine.Claim{UID: "uid-1", Namespace: "ns", Name: "claimed"}
			other := sqlengine.Claim{UID: "uid-2", Namespace: "ns2", Name: "other"}
			sp := sqlengine.Spec{Name: "claimed", Owner: "claimed_owner", Claim: mine}
			if err := admin.CreateRole(ctx, sp.Owner, "pw", mine); err != nil {
				t.Fatal(err)
			}
			if err := admin.CreateDatabase(ctx, sp); err != nil {
				t.Fatal(err)
			}
			if o, err := admin.RoleOwnership(ctx, sp.Owner); err != nil || !o.Exists || o.Claim != mine {
				t.Fatalf("RoleOwnership = %+v, %v", o, err)
			}
			if o, err := admin.DatabaseOwnership(ctx, sp.Name); err != nil || !o.Exists || o.Claim != mine {
				t.Fatalf("DatabaseOwnership = %+v, %v", o, err)
			}
			if o, err := admin.DatabaseOwnership(ctx, "absent"); err != nil || o.Exists || !o.Claim.IsZero() {
				t.Fatalf("DatabaseOwnership(absent) = %+v, %v", o, err)
			}

			// Foreign objects carry no claim.
			if name == "postgres" {
				srv.Exec(t, "", "CREATE ROLE foreign_role LOGIN PASSWORD 'x'", "CREATE DATABASE foreign_db", "COMMENT ON DATABASE foreign_db IS 'payroll, keep'")
			} else {
				srv.Exec(t, "", "CREATE USER 'foreign_role'@'%' IDENTIFIED BY 'x'", "CREATE DATABASE foreign_db COMMENT 'payroll, keep'")
			}
			if o, err := admin.RoleOwnership(ctx, "foreign_role"); err != nil || !o.Exists || !o.Claim.IsZero() {
				t.Fatalf("RoleOwnership(foreign) = %+v, %v", o, err)
			}
			if o, err := admin.DatabaseOwnership(ctx, "foreign_db"); err != nil || !o.Exists || !o.EffectiveClaim().IsZero() {
				t.Fatalf("DatabaseOwnership(foreign) = %+v, %v", o, err)
			}
			// Adoption writes the claim.
			if err := admin.MarkDatabase(ctx, "foreign_db", other); err != nil {
				t.Fatal(err)
			}
			if err := admin.MarkRole(ctx, "foreign_role", other); err != nil {
				t.Fatal(err)
			}
			if o, _ := admin.DatabaseOwnership(ctx, "foreign_db"); o.Claim != other {
				t.Fatalf("after MarkDatabase: %+v", o)
			}
			if o, _ := admin.RoleOwnership(ctx, "foreign_role"); o.Claim != other {
				t.Fatalf("after MarkRole: %+v", o)
			}

			if name == "postgres" {
				// The crash window of CREATE DATABASE: created, not commented.
				srv.Exec(t, "", "CREATE DATABASE crashed OWNER claimed_owner")
				o, err := admin.DatabaseOwnership(ctx, "crashed")
				if err != nil || !o.Claim.IsZero() || o.OwnerRole != "claimed_owner" || o.OwnerRoleClaim != mine || o.EffectiveClaim() != mine {
					t.Fatalf("DatabaseOwnership(crashed) = %+v, %v", o, err)
				}
			} else {
				// The crash window of CREATE USER: claimed, not created.
				crashed := sqlengine.Claim{UID: "uid-3", Namespace: "ns", Name: "crashed"}
				srv.Exec(t, "", "INSERT INTO converge_meta.owned_users (user, claim) VALUES ('crashed_owner', '"+crashed.String()+"')")
				if o, err := admin.RoleOwnership(ctx, "crashed_owner"); err != nil || o.Exists || o.Claim != crashed {
					t.Fatalf("RoleOwnership(claimed, missing) = %+v, %v", o, err)
				}
				if err := admin.CreateRole(ctx, "crashed_owner", "pw", other); err == nil || !strings.Contains(err.Error(), "claimed by") {
					t.Fatalf("another Database created a user claimed by someone else: %v", err)
				}
				if err := admin.CreateRole(ctx, "crashed_owner", "pw", crashed); err != nil {
					t.Fatalf("the claim's owner cannot complete its user: %v", err)
				}
				if err := admin.DropRole(ctx, "crashed_owner", crashed); err != nil {
					t.Fatal(err)
				}
				if o, err := admin.RoleOwnership(ctx, "crashed_owner"); err != nil || o.Exists || !o.Claim.IsZero() {
					t.Fatalf("after DropRole the claim remains: %+v, %v", o, err)
				}
			}

			// Privileged roles, as the server says.
			if why, err := admin.PrivilegedRole(ctx, sp.Owner, srv.AdminUser); err != nil || why != "" {
				t.Fatalf("PrivilegedRole(plain) = %q, %v", why, err)
			}
			if why, err := admin.PrivilegedRole(ctx, srv.AdminUser, srv.AdminUser); err != nil || !strings.Contains(why, "admin user") {
				t.Fatalf("PrivilegedRole(admin) = %q, %v", why, err)
			}
			var privileged map[string]string
			if name == "postgres" {
				srv.Exec(t, "",
					"CREATE ROLE su SUPERUSER", "CREATE ROLE cr CREATEROLE", "CREATE ROLE rep REPLICATION", "CREATE ROLE brls BYPASSRLS",
					"CREATE ROLE member_of_su LOGIN", "GRANT su TO member_of_su",
					"CREATE ROLE reader LOGIN", "GRANT pg_read_all_data TO reader")
				privileged = map[string]string{"su": "SUPERUSER", "cr": "CREATEROLE", "rep": "REPLICATION", "brls": "BYPASSRLS",
					"member_of_su": `member of "su"`, "reader": `member of "pg_read_all_data"`}
			} else {
				srv.Exec(t, "",
					"CREATE USER 'su'@'%'", "GRANT SUPER ON *.* TO 'su'@'%'",
					"CREATE USER 'cu'@'%'", "GRANT CREATE USER ON *.* TO 'cu'@'%'",
					"CREATE USER 'go'@'%'", "GRANT SELECT ON foreign_db.* TO 'go'@'%' WITH GRANT OPTION", "GRANT USAGE ON *.* TO 'go'@'%' WITH GRANT OPTION",
					"CREATE ROLE dba", "GRANT ALL PRIVILEGES ON *.* TO dba", "CREATE USER 'via_role'@'%'", "GRANT dba TO 'via_role'@'%'")
				privileged = map[string]string{"su": "SUPER", "cu": "CREATE USER", "go": "GRANT OPTION", "via_role": "role 'dba'"}
			}
			for role, want := range privileged {
				if why, err := admin.PrivilegedRole(ctx, role, srv.AdminUser); err != nil || !strings.Contains(why, want) {
					t.Errorf("PrivilegedRole(%s) = %q, %v; want it to name %s", role, why, err, want)
				}
			}
		})
	}
}

// TestVerifyFullRefusesAnotherCA: VerifyFull verifies, in the Go drivers and
// in the dump programs: with a CA that did not sign the server's
// certificate the login and the dump fail with a verification error.
func TestVerifyFullRefusesAnotherCA(t *testing.T) {
	other, err := sqltest.NewCAPEM()
	if err != nil {
		t.Fatal(err)
	}
	for name, srv := range servers(t) {
		t.Run(name, func(t *testing.T) {
			sqltest.Need(t, srv, sqlengine.Engine(name))
			ctx := t.Context()
			c := srv.Admin()
			if c.TLSMode != sqlengine.TLSVerifyFull {
				t.Fatalf("sqltest servers serve TLS; admin config is %s", c.TLSMode)
			}
			v, err := sqlengine.Ping(ctx, c)
			if err != nil {
				t.Fatalf("VerifyFull with the right CA: %v", err)
			}
			c.CAPEM = other
			if _, err := sqlengine.Ping(ctx, c); !sqlengine.IsTLSVerifyError(err) {
				t.Fatalf("VerifyFull with another CA: got %v, want a verification error", err)
			}
			srv.Exec(t, "", "CREATE DATABASE tlsdump")
			c.Database = "tlsdump"
			_, err = sqlengine.Dump(ctx, sqlengine.Tools{}, c, v, filepath.Join(t.TempDir(), "d.sql"))
			if err == nil {
				t.Fatal("the dump program accepted a server certificate from another CA")
			}
			if !strings.Contains(strings.ToLower(err.Error()), "certificate") {
				t.Fatalf("dump with another CA failed, but not on the certificate: %v", err)
			}
		})
	}
}
