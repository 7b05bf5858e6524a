package sqlengine_test

import (
	"strings"
	"testing"

	"github.com/converge-dev/converge/internal/sqlengine"
	"github.com/converge-dev/converge/internal/sqltest"
)

// TestSnapshotSeesDrift: one snapshot of a real server shows a provisioned
// spec as matching, and each kind of drift the observers act on as drift:
// revoked privileges, a role that may not log in (PostgreSQL NOLOGIN,
// MariaDB ACCOUNT LOCK), a role given privileged attributes, another owner,
// a marker naming someone else, a dropped database and a dropped role.
func TestSnapshotSeesDrift(t *testing.T) {
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
			mine := sqlengine.Claim{UID: "uid-snap", Namespace: "ns", Name: "snap"}
			sp := sqlengine.Spec{Name: "snap_db", Owner: "snap_owner", Claim: mine}
			if err := admin.CreateRole(ctx, sp.Owner, "pw", mine); err != nil {
				t.Fatal(err)
			}
			if err := admin.CreateDatabase(ctx, sp); err != nil {
				t.Fatal(err)
			}
			if err := admin.Grant(ctx, sp); err != nil {
				t.Fatal(err)
			}
			expect := func(want string) {
				t.Helper()
				snap, err := admin.Snapshot(ctx)
				if err != nil {
					t.Fatal(err)
				}
				got := strings.Join(snap.Drift(sp), "; ")
				if want == "" && got != "" || !strings.Contains(got, want) {
					t.Fatalf("Drift = %q, want %q", got, want)
				}
			}
			expect("")
			other := sp
			other.Claim = sqlengine.Claim{UID: "uid-other", Namespace: "ns", Name: "other"}
			if d := mustSnapshot(t, admin).Drift(other); !strings.Contains(strings.Join(d, ";"), "marker of database") {
				t.Fatalf("a spec with another claim: Drift = %q", d)
			}

			pgDB, pgRole := `"snap_db"`, `"snap_owner"`
			if name == "postgres" {
				srv.Exec(t, "", "REVOKE ALL ON DATABASE "+pgDB+" FROM PUBLIC, "+pgRole)
			} else {
				srv.Exec(t, "", "REVOKE ALL PRIVILEGES ON `snap\\_db`.* FROM 'snap_owner'@'%'")
			}
			expect(`role "snap_owner" lacks`)
			if err := admin.Grant(ctx, sp); err != nil {
				t.Fatal(err)
			}
			expect("")

			if name == "postgres" {
				srv.Exec(t, "", "ALTER ROLE "+pgRole+" NOLOGIN")
			} else {
				srv.Exec(t, "", "ALTER USER 'snap_owner'@'%' ACCOUNT LOCK")
			}
			expect("may not log in")
			if err := admin.SetPassword(ctx, sp.Owner, "pw"); err != nil { // LOGIN / ACCOUNT UNLOCK
				t.Fatal(err)
			}
			expect("")

			if name == "postgres" {
				srv.Exec(t, "", "ALTER ROLE "+pgRole+" CREATEDB")
				expect("privileged attributes")
				srv.Exec(t, "", "ALTER ROLE "+pgRole+" NOCREATEDB", "CREATE ROLE snap_thief", "ALTER DATABASE "+pgDB+" OWNER TO snap_thief")
				expect(`owned by "snap_thief"`)
				if err := admin.Grant(ctx, sp); err != nil {
					t.Fatal(err)
				}
				expect("")
				srv.Exec(t, "", "DROP DATABASE "+pgDB+" WITH (FORCE)", "DROP ROLE snap_thief")
			} else {
				srv.Exec(t, "", "DROP DATABASE `snap_db`")
			}
			expect(`database "snap_db" is missing`)
			if err := admin.DropRole(ctx, sp.Owner, mine); err != nil {
				t.Fatal(err)
			}
			expect(`role "snap_owner" is missing`)
		})
	}
}

func mustSnapshot(t *testing.T, s *sqlengine.Server) *sqlengine.Snapshot {
	t.Helper()
	snap, err := s.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return snap
}
