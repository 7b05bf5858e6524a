// Package egress bounds what the manager reaches on a tenant's behalf: the
// network addresses a GitRepository URL or a database instance's host may
// lead to, and the local directories a file:// GitRepository may read.
//
// A tenant names a host; the manager dials it from its own network position
// (the node's loopback, the cloud's metadata address, the cluster's
// internal services). A Policy refuses the denied networks (loopback,
// link-local and the metadata addresses by default) unless the cluster
// admin allows them, and checks the address actually dialled — after DNS,
// at connect time — so a name that resolves to a denied address, now or
// after a later DNS change, is refused too.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// ErrDenied marks every refusal of a Policy (test with errors.Is).
var ErrDenied = errors.New("refused by the manager's egress policy")

// DeniedError is a refusal: what was refused and what the admin would
// change. It unwraps to ErrDenied.
type DeniedError struct{ msg string }

func (e *DeniedError) Error() string { return ErrDenied.Error() + ": " + e.msg }

// Unwrap returns ErrDenied.
func (e *DeniedError) Unwrap() error { return ErrDenied }

func denied(format string, args ...any) error {
	return &DeniedError{msg: fmt.Sprintf(format, args...)}
}

// DefaultDenied are the networks refused unless allowed: loopback,
// "this host", link-local (the cloud metadata address 169.254.169.254
// among them) and AWS's IPv6 metadata address.
var DefaultDenied = []string{
	"127.0.0.0/8", "::1/128",
	"0.0.0.0/8", "::/128",
	"169.254.0.0/16", "fe80::/10",
	"fd00:ec2::254/128",
}

// Loopback are the loopback networks; `converge up` and the test suites,
// whose peers listen on loopback, allow them.
var Loopback = []string{"127.0.0.0/8", "::1/128"}

// Policy says where the manager may reach for a tenant. The zero Policy
// denies nothing and reads no file:// source; a nil *Policy restricts
// nothing (the CLI, acting as its user, passes nil).
type Policy struct {
	// Denied networks are refused, unless an Allowed one holds the address.
	Denied []netip.Prefix
	// Allowed networks are exceptions to Denied.
	Allowed []netip.Prefix
	// FileRoots are the directories under which a file:// source may be
	// read; none reads no file:// source.
	FileRoots []string
	// Resolve looks a host name up for the checks made before a dial; nil
	// is the system resolver. (The dial itself always uses the system
	// resolver and is checked again, so a lookup that lies is caught there.)
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
}

// Flags of `converge run` that set a Policy.
const (
	DeniedFlag    = "--egress-denied-cidrs"
	AllowedFlag   = "--egress-allowed-cidrs"
	FileRootsFlag = "--git-file-roots"
)

// New parses the CIDRs (an address without a prefix length is one
// address) and cleans the roots. Errors name the flag.
func New(denied, allowed, fileRoots []string) (*Policy, error) {
	p := &Policy{}
	var err error
	if p.Denied, err = parsePrefixes(denied, DeniedFlag); err != nil {
		return nil, err
	}
	if p.Allowed, err = parsePrefixes(allowed, AllowedFlag); err != nil {
		return nil, err
	}
	for _, r := range fileRoots {
		if r == "" {
			continue
		}
		if !filepath.IsAbs(r) {
			return nil, fmt.Errorf("%s=%q: want an absolute directory", FileRootsFlag, r)
		}
		p.FileRoots = append(p.FileRoots, filepath.Clean(r))
	}
	return p, nil
}

func parsePrefixes(in []string, flag string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range in {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !strings.Contains(s, "/") {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("%s=%q: want a CIDR (10.0.0.0/8) or an address", flag, s)
			}
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("%s=%q: want a CIDR (10.0.0.0/8) or an address", flag, s)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// CheckAddr refuses a denied address that no allowed network holds.
func (p *Policy) CheckAddr(a netip.Addr) error {
	if p == nil {
		return nil
	}
	a = a.Unmap().WithZone("")
	for _, n := range p.Allowed {
		if n.Contains(a) {
			return nil
		}
	}
	for _, n := range p.Denied {
		if n.Contains(a) {
			return denied("%s is in %s, which the cluster admin denies (%s); ask for it with %s",
				a, n, DeniedFlag, AllowedFlag)
		}
	}
	return nil
}

// CheckHost resolves host (a name or an address) and refuses it when any
// of its addresses is denied. A name that does not resolve is not refused
// here: the dial says so in its own words.
func (p *Policy) CheckHost(ctx context.Context, host string) error {
	if p == nil {
		return nil
	}
	if _, err := p.ResolveHost(ctx, host); Denial(err) != nil {
		return err
	}
	return nil
}

// ResolveHost resolves and checks host as CheckHost does, and returns one
// checked address to dial,
// for tools that resolve on their own (pg_dump, git://): connecting to it
// leaves no window for the name to change in between.
func (p *Policy) ResolveHost(ctx context.Context, host string) (netip.Addr, error) {
	bare := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if a, err := netip.ParseAddr(bare); err == nil {
		return a, p.CheckAddr(a)
	}
	addrs, err := p.lookup(ctx, bare)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("resolving %s: %w", bare, err)
	}
	for _, a := range addrs {
		if err := p.CheckAddr(a); err != nil {
			return netip.Addr{}, fmt.Errorf("host %s: %w", bare, err)
		}
	}
	if len(addrs) == 0 {
		return netip.Addr{}, fmt.Errorf("resolving %s: no address", bare)
	}
	return addrs[0].Unmap(), nil
}

func (p *Policy) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	if p != nil && p.Resolve != nil {
		return p.Resolve(ctx, host)
	}
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// DialContext dials as a net.Dialer whose control function refuses, at
// connect time, every denied address (after DNS, on every address tried).
func (p *Policy) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	d := &net.Dialer{KeepAlive: 30 * time.Second}
	if p != nil {
		d.Control = func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return denied("cannot read the address %q", address)
			}
			return p.CheckAddr(ap.Addr())
		}
	}
	return d.DialContext(ctx, network, address)
}

// CheckFile refuses a path outside every FileRoots directory (symbolic
// links resolved, so a link inside a root cannot lead out of it).
func (p *Policy) CheckFile(path string) error {
	if p == nil {
		return nil
	}
	flag := FileRootsFlag
	if len(p.FileRoots) == 0 {
		return denied("file:// sources are off (%s names no directory); ask the cluster admin", flag)
	}
	clean := filepath.Clean(path)
	// Links resolved as far as the path exists, the rest kept as written:
	// a link inside a root that leads out is refused whether or not what
	// follows it exists, and the refusal reads the same either way.
	real := resolveExisting(clean)
	for _, root := range p.FileRoots {
		if within(real, resolveExisting(root)) && within(clean, root) {
			return nil
		}
	}
	return denied("%s is outside the directories file:// sources may read (%s=%s); ask the cluster admin",
		clean, flag, strings.Join(p.FileRoots, ","))
}

// resolveExisting resolves the symbolic links of the longest existing
// prefix of path and appends the rest.
func resolveExisting(path string) string {
	rest := ""
	for p := path; ; p = filepath.Dir(p) {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(r, rest)
		}
		if p == filepath.Dir(p) {
			return path
		}
		rest = filepath.Join(filepath.Base(p), rest)
	}
}

func within(path, root string) bool {
	if root == string(os.PathSeparator) {
		return true
	}
	return path == root || strings.HasPrefix(path, root+string(os.PathSeparator))
}

// Denial returns the refusal inside err — without the words of the
// clients around it — or nil when err is not a refusal.
func Denial(err error) error {
	var d *DeniedError
	if errors.As(err, &d) {
		return d
	}
	return nil
}

type ctxKey struct{}

// WithPolicy returns ctx carrying p, for dialers that only see a context
// (the git transports, shared by every caller in the process).
func WithPolicy(ctx context.Context, p *Policy) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// FromContext returns the Policy WithPolicy put in ctx, or nil.
func FromContext(ctx context.Context) *Policy {
	p, _ := ctx.Value(ctxKey{}).(*Policy)
	return p
}
