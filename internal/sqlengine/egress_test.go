package sqlengine_test

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/converge-dev/converge/internal/egress"
	"github.com/converge-dev/converge/internal/sqlengine"
	"github.com/converge-dev/converge/internal/sqltest"
)

// TestEgressPolicyBeforeEveryConnection: with loopback denied, neither the
// drivers nor the client programs (dump, restore) reach a server on
// loopback, and the refusal is an egress.DeniedError. The client programs,
// which resolve names on their own, connect to the address that was
// checked: when the check's lookup says 127.0.0.2 (where nothing listens)
// the dump fails there although the system resolver would have led it to
// the server on 127.0.0.1.
func TestEgressPolicyBeforeEveryConnection(t *testing.T) {
	for name, srv := range servers(t) {
		t.Run(name, func(t *testing.T) {
			sqltest.Need(t, srv, sqlengine.Engine(name))
			path := refusedOnEveryPath(t, srv)
			clientsGetTheCheckedAddress(t, srv, name, path)
		})
	}
}

// refusedOnEveryPath checks the drivers and the client programs refuse a
// denied server, and returns a dump file for the next step.
func refusedOnEveryPath(t *testing.T, srv *sqltest.Server) string {
	t.Helper()
	ctx := t.Context()
	deny, err := egress.New(egress.DefaultDenied, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := srv.Admin()
	c.Egress = deny
	if _, err := sqlengine.Ping(ctx, c); egress.Denial(err) == nil {
		t.Fatalf("Ping with loopback denied: got %v, want a refusal", err)
	}
	if err := sqlengine.CheckLogin(ctx, c); egress.Denial(err) == nil {
		t.Fatalf("CheckLogin with loopback denied: got %v, want a refusal", err)
	}
	c.Database = "egress_db" // never reached
	path := filepath.Join(t.TempDir(), "d.sql")
	if _, err := sqlengine.Dump(ctx, sqlengine.Tools{}, c, "", path); egress.Denial(err) == nil {
		t.Fatalf("Dump with loopback denied: got %v, want a refusal", err)
	}
	if _, err := os.Stat(path); err == nil {
		t.Fatal("the refused dump wrote a file")
	}
	if err := os.WriteFile(path, []byte("SELECT 1;\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := sqlengine.Restore(ctx, sqlengine.Tools{}, c, "", path, ""); egress.Denial(err) == nil {
		t.Fatalf("Restore with loopback denied: got %v, want a refusal", err)
	}
	return path
}

// clientsGetTheCheckedAddress: the check's lookup says "localhost" is
// 127.0.0.2; the client programs must be given that address, not the name.
func clientsGetTheCheckedAddress(t *testing.T, srv *sqltest.Server, name, path string) {
	t.Helper()
	ctx := t.Context()
	pinned, err := egress.New([]string{"127.0.0.1/32", "::1/128"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	pinned.Resolve = func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("127.0.0.2")}, nil
	}
	c := srv.Admin()
	c.Database, c.Egress, c.Host = "egress_db", pinned, "localhost"
	given := func(want string) {
		t.Helper()
		got, err := sqlengine.ClientConnection(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(got, want) {
			t.Fatalf("%s: the client program is not given %s:\n%s", c.TLSMode, want, got)
		}
	}
	if name == "postgres" {
		given("PGHOSTADDR=127.0.0.2") // the name stays PGHOST, for verify-full
		// And it connects there: nothing listens on 127.0.0.2.
		_, err = sqlengine.Dump(ctx, sqlengine.Tools{}, c, "", path)
		if err == nil || !strings.Contains(err.Error(), "127.0.0.2") {
			t.Fatalf("Dump by name: got %v, want a failure to connect to the checked address 127.0.0.2", err)
		}
		return
	}
	// The MariaDB clients verify the name they connect to: the checked
	// address replaces it unless VerifyFull needs the name.
	if c.TLSMode != sqlengine.TLSVerifyFull {
		t.Fatalf("the suite's MariaDB admin connection is %s, this test expects VerifyFull", c.TLSMode)
	}
	given(`host="localhost"`)
	c.TLSMode = sqlengine.TLSRequire
	given(`host="127.0.0.2"`)
}
