package egress_test

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/converge-dev/converge/internal/egress"
)

func TestCheckAddr(t *testing.T) {
	p, err := egress.New(egress.DefaultDenied, []string{"127.0.0.53", "fe80::1/128"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for addr, refused := range map[string]bool{
		"127.0.0.1": true, "127.255.255.254": true, "::1": true, "::ffff:127.0.0.1": true,
		"169.254.169.254": true, "fd00:ec2::254": true, "fe80::2": true, "0.0.0.0": true, "::": true,
		"127.0.0.53": false, "fe80::1": false, // allowed exceptions
		"10.0.0.1": false, "192.0.2.1": false, "2001:db8::1": false,
	} {
		err := p.CheckAddr(netip.MustParseAddr(addr))
		if refused != (err != nil) {
			t.Errorf("%s: refused=%v, got %v", addr, refused, err)
		}
		if err != nil && (!errors.Is(err, egress.ErrDenied) || egress.Denial(err) == nil || !strings.Contains(err.Error(), egress.AllowedFlag)) {
			t.Errorf("%s: the refusal %q is not an egress.DeniedError naming %s", addr, err, egress.AllowedFlag)
		}
	}
	var none *egress.Policy
	if err := none.CheckAddr(netip.MustParseAddr("127.0.0.1")); err != nil {
		t.Errorf("a nil Policy refuses: %v", err)
	}
}

func TestNewNamesTheFlag(t *testing.T) {
	for _, tc := range []struct {
		denied, allowed, roots []string
		flag                   string
	}{
		{[]string{"10.0.0.0/33"}, nil, nil, egress.DeniedFlag},
		{nil, []string{"nope"}, nil, egress.AllowedFlag},
		{nil, nil, []string{"relative/dir"}, egress.FileRootsFlag},
	} {
		_, err := egress.New(tc.denied, tc.allowed, tc.roots)
		if err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("New(%v, %v, %v) = %v, want an error naming %s", tc.denied, tc.allowed, tc.roots, err, tc.flag)
		}
	}
}

func TestCheckFile(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "repo.git"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "out")); err != nil {
		t.Fatal(err)
	}
	p, err := egress.New(nil, nil, []string{root})
	if err != nil {
		t.Fatal(err)
	}
	for path, refused := range map[string]bool{
		filepath.Join(root, "repo.git"):        false,
		filepath.Join(root, "missing.git"):     false, // the clone says it is missing
		root:                                   false,
		root + "-sibling/repo.git":             true,
		filepath.Join(root, "out"):             true,
		filepath.Join(root, "out", "x.git"):    true,
		root + "/../" + filepath.Base(outside): true,
		"/":                                    true,
	} {
		err := p.CheckFile(path)
		if refused != (err != nil) {
			t.Errorf("%s: refused=%v, got %v", path, refused, err)
		}
	}
	off, _ := egress.New(nil, nil, nil)
	if err := off.CheckFile(filepath.Join(root, "repo.git")); err == nil || !strings.Contains(err.Error(), "file:// sources are off") {
		t.Errorf("no roots: got %v", err)
	}
}
