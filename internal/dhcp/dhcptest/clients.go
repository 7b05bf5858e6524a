package dhcptest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/converge-dev/converge/internal/netns"
)

// Event is one call of a DHCP client's script: the reason (udhcpc: bound,
// renew, deconfig, leasefail, nak; dhclient: BOUND, RENEW, ...) and the
// variables the client passed.
type Event struct {
	Reason string
	Vars   map[string]string
}

// Client is a DHCP client process running in a namespace.
type Client struct {
	cmd    *exec.Cmd
	events string
	done   chan struct{}
	err    error
	once   sync.Once
	// LeaseFile is dhclient's lease file (empty for udhcpc).
	LeaseFile string
}

// udhcpcScript records each call and applies the address, so renewals go
// out from the leased address as on a real machine.
const udhcpcScript = `#!/bin/sh
EVENTS=@EVENTS@
exec 2>>"$EVENTS.trace"
{
  echo "reason=$1"
  echo "at=$(date +%s.%N)"
  for v in ip subnet mask router dns domain search ntpsrv lease serverid hostname; do
    eval "x=\${$v}"
    [ -n "$x" ] && echo "$v=$x"
  done
  echo "--"
} >> "$EVENTS"
case "$1" in
  bound|renew) ip addr replace "$ip/$mask" dev "$interface" ;;
  deconfig) ip -4 addr flush dev "$interface" ;;
esac
exit 0
`

// dhclientScript is the same for dhclient; it never touches resolv.conf
// (the namespace shares the host's /etc).
const dhclientScript = `#!/bin/sh
EVENTS=@EVENTS@
{
  echo "reason=$reason"
  for v in new_ip_address new_subnet_mask new_routers new_domain_name_servers new_domain_name new_domain_search new_ntp_servers new_dhcp_lease_time new_host_name new_dhcp_server_identifier; do
    eval "x=\${$v}"
    [ -n "$x" ] && echo "$v=$x"
  done
  echo "--"
} >> "$EVENTS"
case "$reason" in
  BOUND|RENEW|REBIND|REBOOT) ip addr replace "$new_ip_address/$new_subnet_mask" dev "$interface" ;;
  EXPIRE|FAIL|RELEASE|STOP) ip -4 addr flush dev "$interface" ;;
esac
exit 0
`

const dhclientConf = `request subnet-mask, routers, domain-name-servers, host-name, domain-name, domain-search, ntp-servers, dhcp-lease-time, dhcp-server-identifier;
timeout 20;
retry 1;
initial-interval 1;
`

// Udhcpc starts busybox udhcpc in ns on eth0, in the foreground, asking for
// every option the agent serves. dir receives its files.
func Udhcpc(ctx context.Context, ns, dir string) (*Client, error) {
	bin, err := exec.LookPath("udhcpc")
	if err != nil {
		return nil, err
	}
	script := filepath.Join(dir, "udhcpc.sh")
	events := filepath.Join(dir, "udhcpc.events")
	if err := os.WriteFile(script, []byte(strings.ReplaceAll(udhcpcScript, "@EVENTS@", events)), 0o700); err != nil {
		return nil, err
	}
	// -f foreground, -t/-T retry quickly, -A 1 retry a failed lease after
	// 1 s, -R release on exit, -O the options beyond udhcpc's defaults.
	return start(ctx, ns, events, "", bin, "-f", "-i", "eth0", "-s", script, "-t", "20", "-T", "1", "-A", "1", "-R",
		"-O", "search", "-O", "ntpsrv", "-O", "lease", "-O", "hostname", "-O", "domain")
}

// Dhclient starts ISC dhclient in ns on eth0 in the foreground with its own
// config, script, lease and pid files in dir.
func Dhclient(ctx context.Context, ns, dir string) (*Client, error) {
	bin, err := exec.LookPath("dhclient")
	if err != nil {
		return nil, err
	}
	script := filepath.Join(dir, "dhclient.sh")
	conf := filepath.Join(dir, "dhclient.conf")
	leases := filepath.Join(dir, "dhclient.leases")
	events := filepath.Join(dir, "dhclient.events")
	if err := os.WriteFile(script, []byte(strings.ReplaceAll(dhclientScript, "@EVENTS@", events)), 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(conf, []byte(dhclientConf), 0o600); err != nil {
		return nil, err
	}
	return start(ctx, ns, events, leases, bin, "-4", "-d", "-v", "-cf", conf, "-sf", script, "-lf", leases,
		"-pf", filepath.Join(dir, "dhclient.pid"), "eth0")
}

// dhcpcdScript records each call; dhcpcd configures the interface itself.
const dhcpcdScript = `#!/bin/sh
EVENTS=@EVENTS@
{
  echo "reason=$reason"
  for v in new_ip_address new_subnet_mask new_routers new_domain_name_servers new_domain_name new_domain_search new_ntp_servers new_dhcp_lease_time new_host_name new_dhcp_server_identifier; do
    eval "x=\${$v}"
    [ -n "$x" ] && echo "$v=$x"
  done
  echo "--"
} >> "$EVENTS"
exit 0
`

// dhcpcdConf asks for every option the agent serves and nothing that
// would wait for IPv6 or link-local fallbacks.
const dhcpcdConf = `option subnet_mask, routers, domain_name_servers, domain_name, domain_search, ntp_servers, dhcp_lease_time, host_name, dhcp_server_identifier
duid
noipv4ll
noarp
timeout 30
`

// Dhcpcd starts dhcpcd (Roy Marples') in ns on eth0 in the foreground, IPv4
// only, with its own config and script. dhcpcd has no flag for its run and
// database directories (/run/dhcpcd, /var/lib/dhcpcd), shared by every
// namespace: it runs in `ip netns exec`'s own mount namespace with a tmpfs
// on each, so clients of parallel tests never meet and nothing is left on
// the host. dhcpcd identifies itself with a DUID-based client identifier
// (RFC 4361), not its MAC: what a server keying leases on the client
// identifier would get wrong.
func Dhcpcd(ctx context.Context, ns, dir string) (*Client, error) {
	bin, err := exec.LookPath("dhcpcd")
	if err != nil {
		return nil, err
	}
	script := filepath.Join(dir, "dhcpcd.sh")
	conf := filepath.Join(dir, "dhcpcd.conf")
	events := filepath.Join(dir, "dhcpcd.events")
	if err := os.WriteFile(script, []byte(strings.ReplaceAll(dhcpcdScript, "@EVENTS@", events)), 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(conf, []byte(dhcpcdConf), 0o600); err != nil {
		return nil, err
	}
	sh := `set -e
for d in /run/dhcpcd /var/lib/dhcpcd; do [ -d "$d" ] && mount -t tmpfs tmpfs "$d"; done
exec "$@"`
	if _, err := os.Stat("/run/dhcpcd"); err != nil {
		// No directory to mount over: give the whole of /run a tmpfs
		// (this mount namespace's only).
		sh = `set -e
mount -t tmpfs tmpfs /run
[ -d /var/lib/dhcpcd ] && mount -t tmpfs tmpfs /var/lib/dhcpcd
exec "$@"`
	}
	return start(ctx, ns, events, "", "sh", "-c", sh, "dhcpcd", bin, "-B", "-4", "-d", "-f", conf, "-c", script, "eth0")
}

func start(ctx context.Context, ns, events, leases, bin string, args ...string) (*Client, error) {
	cmd := netns.Command(ctx, ns, bin, args...)
	log, err := os.Create(events + ".log")
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return nil, err
	}
	c := &Client{cmd: cmd, events: events, done: make(chan struct{}), LeaseFile: leases}
	go func() {
		c.err = cmd.Wait()
		_ = log.Close()
		close(c.done)
	}()
	return c, nil
}

// Signal sends sig to the client (udhcpc: SIGUSR1 renews, SIGUSR2
// releases).
func (c *Client) Signal(sig syscall.Signal) error {
	// `ip netns exec` execs the client, so the process is the client.
	return c.cmd.Process.Signal(sig)
}

// Stop ends the client (SIGTERM: udhcpc -R releases first) and waits.
func (c *Client) Stop() {
	c.once.Do(func() {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			<-c.done
		}
	})
}

// Log is the client's own output (and its script's trace).
func (c *Client) Log() string {
	b, _ := os.ReadFile(c.events + ".log")
	tr, _ := os.ReadFile(c.events + ".trace")
	return string(b) + string(tr)
}

// Events parses what the script recorded so far.
func (c *Client) Events() ([]Event, error) {
	f, err := os.Open(c.events)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Event
	cur := Event{Vars: map[string]string{}}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "--" {
			out = append(out, cur)
			cur = Event{Vars: map[string]string{}}
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		if k == "reason" {
			cur.Reason = v
			continue
		}
		cur.Vars[k] = v
	}
	return out, sc.Err()
}

// WaitEvent waits until an event with one of reasons arrives after the
// first skip events, and returns it.
func (c *Client) WaitEvent(ctx context.Context, skip int, timeout time.Duration, reasons ...string) (Event, int, error) {
	deadline := time.Now().Add(timeout)
	for {
		evs, err := c.Events()
		if err != nil {
			return Event{}, 0, err
		}
		for i := skip; i < len(evs); i++ {
			for _, r := range reasons {
				if evs[i].Reason == r {
					return evs[i], i + 1, nil
				}
			}
		}
		select {
		case <-c.done:
			return Event{}, 0, fmt.Errorf("the client exited (%w) before %v; its log:\n%s", c.err, reasons, c.Log())
		case <-ctx.Done():
			return Event{}, 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return Event{}, 0, fmt.Errorf("no %v within %s; events %+v; the client's log:\n%s", reasons, timeout, evs, c.Log())
		}
	}
}

// LeaseFileText is dhclient's lease file as it is now.
func (c *Client) LeaseFileText() string {
	b, _ := os.ReadFile(c.LeaseFile)
	return string(b)
}

// WaitLeaseFile waits until dhclient's lease file holds a complete lease
// block and returns its text. dhclient runs its script (BOUND) before it
// writes the lease, so the file can still be empty when the event is seen.
func (c *Client) WaitLeaseFile(ctx context.Context, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		text := c.LeaseFileText()
		if i := strings.Index(text, "lease {"); i >= 0 && strings.Contains(text[i:], "\n}") {
			return text, nil
		}
		if time.Now().After(deadline) {
			return text, fmt.Errorf("dhclient wrote no complete lease to %s within %s", c.LeaseFile, timeout)
		}
		select {
		case <-ctx.Done():
			return text, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
