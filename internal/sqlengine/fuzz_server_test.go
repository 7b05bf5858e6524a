package sqlengine_test

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"unicode/utf8"

	"github.com/converge-dev/converge/internal/sqlengine"
	"github.com/converge-dev/converge/internal/sqltest"
)

// The targets below check the quoting and validation against what the real
// servers do, not against the package's own inverse. `go test` runs their
// seeds on both servers; `make fuzz` fuzzes them: the coordinating process
// starts the two servers and its fuzz workers (separate processes) connect
// to them (sqltest.Main).

// pools is shared by every run of a fuzz function in this process.
var pools sqlengine.Pools

// adminServers returns an admin connection per started server.
func adminServers(t *testing.T) map[string]*sqlengine.Server {
	t.Helper()
	out := map[string]*sqlengine.Server{}
	for name, srv := range servers(t) {
		sqltest.Need(t, srv, sqlengine.Engine(name))
		a, err := pools.Admin(srv.Admin())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out[name] = a
	}
	return out
}

// FuzzIdentifierOnServers: every name the validator accepts can be created
// as a role and a database on PostgreSQL and MariaDB, is found in the
// server's catalogue by exactly that name, and drops cleanly, leaving
// nothing behind.
func FuzzIdentifierOnServers(f *testing.F) {
	for _, s := range []string{"app", "a-b", "_", "x_1-2", strings.Repeat("z", 63), "app_db-1", "b--", "n0-_"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if sqlengine.ValidateIdentifier(s) != nil {
			return
		}
		// Two fuzz workers may try the same name at once; each run owns
		// the servers' catalogues while it creates and drops.
		defer exclusive(t)()
		ctx := t.Context()
		for name, admin := range adminServers(t) {
			// A previous crashing input may have left it: start clean.
			if err := admin.DropDatabase(ctx, s); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if err := admin.DropRole(ctx, s, sqlengine.Claim{}); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if err := admin.CreateRole(ctx, s, "pw", sqlengine.Claim{}); err != nil {
				t.Fatalf("%s: the validator accepted %q but creating the role failed: %v", name, s, err)
			}
			if err := admin.CreateDatabase(ctx, sqlengine.Spec{Name: s, Owner: s}); err != nil {
				t.Fatalf("%s: the validator accepted %q but creating the database failed: %v", name, s, err)
			}
			info, err := admin.Database(ctx, s)
			if err != nil || !info.Exists {
				t.Fatalf("%s: database %q not found by its exact name after creating it (%+v, %v)", name, s, info, err)
			}
			if ok, err := admin.RoleExists(ctx, s); err != nil || !ok {
				t.Fatalf("%s: role %q not found by its exact name after creating it (%v)", name, s, err)
			}
			if err := admin.DropDatabase(ctx, s); err != nil {
				t.Fatalf("%s: dropping %q: %v", name, s, err)
			}
			if err := admin.DropRole(ctx, s, sqlengine.Claim{}); err != nil {
				t.Fatalf("%s: dropping role %q: %v", name, s, err)
			}
			if info, err := admin.Database(ctx, s); err != nil || info.Exists {
				t.Fatalf("%s: database %q still there after the drop (%v)", name, s, err)
			}
			if ok, err := admin.RoleExists(ctx, s); err != nil || ok {
				t.Fatalf("%s: role %q still there after the drop (%v)", name, s, err)
			}
		}
	})
}

// FuzzQuoteOnServers: a string literal the package quotes reads back from
// both servers byte for byte (SELECT <literal>), or is refused by the
// quoting; and on PostgreSQL any identifier it quotes (valid UTF-8, no NUL,
// at most 63 bytes, the server's limit) comes back unchanged as the column
// name of SELECT 1 AS <identifier>. So no input ends a quoted token early.
func FuzzQuoteOnServers(f *testing.F) {
	for _, s := range []string{"app", "it's", `a"b`, "a`b", `"`, "``", "''", `x"; DROP DATABASE y; --`, "x'); DROP TABLE t; --", " lead", "trail ", "ü", "%_"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ctx := t.Context()
		for name, srv := range servers(t) {
			sqltest.Need(t, srv, sqlengine.Engine(name))
			db := sharedDB(t, name, srv)
			if lit, err := sqlengine.QuoteLiteral(s); err == nil {
				var got string
				if err := db.QueryRowContext(ctx, "SELECT "+lit).Scan(&got); err != nil {
					t.Fatalf("%s: SELECT %s: %v", name, lit, err)
				}
				if got != s {
					t.Fatalf("%s: literal %q read back as %q", name, s, got)
				}
			}
			if name != "postgres" || !utf8.ValidString(s) || len(s) > sqlengine.MaxIdentifierLength || s == "" {
				continue
			}
			q, err := sqlengine.QuotePostgres(s)
			if err != nil {
				continue // NUL: refused, as it should be
			}
			rows, err := db.QueryContext(ctx, "SELECT 1 AS "+q)
			if err != nil {
				t.Fatalf("postgres: SELECT 1 AS %s: %v", q, err)
			}
			cols, err := rows.Columns()
			_ = rows.Close()
			if err != nil || len(cols) != 1 || cols[0] != s {
				t.Fatalf("postgres: identifier %q came back as %q (%v)", s, cols, err)
			}
		}
	})
}

// exclusive takes a lock shared by every process on this machine (fuzz
// workers are processes) and returns its release.
func exclusive(t *testing.T) func() {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "converge-sqlengine-fuzz.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		t.Fatal(err)
	}
	return func() { _ = f.Close() } // closing the file releases the lock
}

var (
	dbMu sync.Mutex
	dbs  = map[string]*sql.DB{}
)

// sharedDB is one admin pool per server for the whole process (a fuzz
// process runs the function many thousand times).
func sharedDB(t *testing.T, name string, srv *sqltest.Server) *sql.DB {
	t.Helper()
	dbMu.Lock()
	defer dbMu.Unlock()
	if db := dbs[name]; db != nil {
		return db
	}
	db, err := sqlengine.OpenDB(srv.Admin())
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	dbs[name] = db
	return db
}
