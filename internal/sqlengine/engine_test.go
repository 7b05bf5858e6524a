package sqlengine_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/converge-dev/converge/internal/sqlengine"
	"github.com/converge-dev/converge/internal/sqltest"
)

var pg, maria *sqltest.Server

func TestMain(m *testing.M) {
	for _, a := range os.Args {
		// Fuzzing a target that does not touch a server starts none. The
		// *OnServers targets get the servers of the coordinating process
		// (sqltest.Main passes them to the fuzz workers).
		if v, ok := strings.CutPrefix(a, "-test.fuzz="); ok && !strings.Contains(v, "OnServers") {
			os.Exit(m.Run())
		}
	}
	os.Exit(sqltest.Main(m.Run, &pg, &maria))
}

func servers(t *testing.T) map[string]*sqltest.Server {
	return map[string]*sqltest.Server{"postgres": pg, "mariadb": maria}
}

// TestProvisionDriftDropDump drives the engine operations the controllers
// use on both real servers: create, observe, lose and regain privileges,
// reset a password, dump and load, drop with a connection open.
func TestProvisionDriftDropDump(t *testing.T) {
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
			v, err := admin.Ping(ctx)
			if err != nil || v == "" {
				t.Fatalf("Ping = %q, %v", v, err)
			}
			sp := sqlengine.Spec{Name: "shop_db-1", Owner: "shop_owner"}
			if err := admin.CreateRole(ctx, sp.Owner, "pw1", sqlengine.Claim{}); err != nil {
				t.Fatal(err)
			}
			if err := admin.CreateDatabase(ctx, sp); err != nil {
				t.Fatal(err)
			}
			if err := admin.Grant(ctx, sp); err != nil {
				t.Fatal(err)
			}
			if m, err := admin.MissingPrivileges(ctx, sp); err != nil || len(m) != 0 {
				t.Fatalf("MissingPrivileges = %v, %v", m, err)
			}
			login := srv.Config(sp.Owner, "pw1", sp.Name)
			if err := sqlengine.CheckLogin(ctx, login); err != nil {
				t.Fatalf("owner login: %v", err)
			}
			if err := sqlengine.CheckLogin(ctx, srv.Config(sp.Owner, "wrong", sp.Name)); !sqlengine.IsAuthError(err) {
				t.Fatalf("wrong password: got %v, want an auth error", err)
			}
			// Revoke and regain.
			if name == "postgres" {
				srv.Exec(t, "", `REVOKE ALL ON DATABASE "shop_db-1" FROM PUBLIC, shop_owner`)
			} else {
				srv.Exec(t, "", "REVOKE ALL PRIVILEGES ON `shop\\_db-1`.* FROM 'shop_owner'@'%'")
			}
			if m, err := admin.MissingPrivileges(ctx, sp); err != nil || len(m) == 0 {
				t.Fatalf("after REVOKE, MissingPrivileges = %v, %v", m, err)
			}
			if err := admin.Grant(ctx, sp); err != nil {
				t.Fatal(err)
			}
			if m, err := admin.MissingPrivileges(ctx, sp); err != nil || len(m) != 0 {
				t.Fatalf("after Grant, MissingPrivileges = %v, %v", m, err)
			}
			if err := admin.SetPassword(ctx, sp.Owner, "pw2"); err != nil {
				t.Fatal(err)
			}
			login.Password = "pw2"
			if err := sqlengine.CheckLogin(ctx, login); err != nil {
				t.Fatalf("login after reset: %v", err)
			}
			// Data, dump, load into a second database.
			ownerDB, err := sqlengine.OpenDB(login)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = ownerDB.Close() }()
			for _, st := range []string{"CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(20))", "INSERT INTO items VALUES (1, 'a'), (2, 'b')"} {
				if _, err := ownerDB.ExecContext(ctx, st); err != nil {
					t.Fatal(err)
				}
			}
			path := filepath.Join(t.TempDir(), "d.sql")
			res, err := sqlengine.Dump(ctx, sqlengine.Tools{}, srv.Config(srv.AdminUser, srv.AdminPassword, sp.Name), v, path)
			if err != nil {
				t.Fatal(err)
			}
			if res.SizeBytes == 0 || len(res.SHA256) != 64 || res.Tool == "" {
				t.Fatalf("dump result %+v", res)
			}
			sp2 := sqlengine.Spec{Name: "shop_copy", Owner: "shop_copy_owner"}
			if err := admin.CreateRole(ctx, sp2.Owner, "pw3", sqlengine.Claim{}); err != nil {
				t.Fatal(err)
			}
			if err := admin.CreateDatabase(ctx, sp2); err != nil {
				t.Fatal(err)
			}
			if err := admin.Grant(ctx, sp2); err != nil {
				t.Fatal(err)
			}
			if err := sqlengine.Restore(ctx, sqlengine.Tools{}, srv.Config(sp2.Owner, "pw3", sp2.Name), v, path, "0000"); err == nil {
				t.Fatal("Restore accepted a wrong checksum")
			}
			if err := sqlengine.Restore(ctx, sqlengine.Tools{}, srv.Config(sp2.Owner, "pw3", sp2.Name), v, path, res.SHA256); err != nil {
				t.Fatal(err)
			}
			copyDB := srv.Open(t, sp2.Name)
			var n int
			if err := copyDB.QueryRowContext(ctx, "SELECT COUNT(*) FROM items").Scan(&n); err != nil || n != 2 {
				t.Fatalf("restored rows = %d, %v", n, err)
			}
			// Drop with an open connection.
			if err := ownerDB.PingContext(ctx); err != nil {
				t.Fatal(err)
			}
			if err := admin.Drop(ctx, sp); err != nil {
				t.Fatalf("Drop with an open connection: %v", err)
			}
			if info, err := admin.Database(ctx, sp.Name); err != nil || info.Exists {
				t.Fatalf("after Drop: %+v, %v", info, err)
			}
			if ok, err := admin.RoleExists(ctx, sp.Owner); err != nil || ok {
				t.Fatalf("role after Drop: %v, %v", ok, err)
			}
			if err := admin.Drop(ctx, sp); err != nil {
				t.Fatalf("Drop is not idempotent: %v", err)
			}
		})
	}
}
