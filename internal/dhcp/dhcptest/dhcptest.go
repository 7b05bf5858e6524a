// Package dhcptest builds throwaway networks for DHCP tests and
// benchmarks: a network namespace holding a machine network's bridge (as
// Converge makes it for QemuMachine NICs), and client namespaces whose eth0
// (a veth with a chosen MAC address and no IPv4 address) hangs on that
// bridge, plus helpers running real DHCP clients (busybox udhcpc, ISC
// dhclient) there and reading what they wrote. Everything is removed by
// Close; namespaces left by a killed run are swept by the next (their names
// carry the creating process id). Needs root.
package dhcptest

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/converge-dev/converge/internal/netns"
)

const prefix = "cvdh"

var seq atomic.Int32

// Net is one bridge in its own namespace, with clients.
type Net struct {
	// Netns holds the bridge (the agent serves inside it).
	Netns string
	// Bridge is the bridge's name.
	Bridge string
	name   string
	n      int

	mu      sync.Mutex
	closers []func()
}

// New makes a namespace with bridge (named bridge) holding addr (the
// DHCP server's address, with its prefix length). Close it, also on
// failure (New closes what it made when it fails).
func New(ctx context.Context, bridge string, addr netip.Prefix) (n *Net, err error) {
	if !netns.IsRoot() {
		return nil, fmt.Errorf("DHCP network tests need root (network namespaces); running as uid %d", os.Geteuid())
	}
	Sweep(ctx)
	n = &Net{name: fmt.Sprintf("%s%d-%d", prefix, os.Getpid(), seq.Add(1)), Bridge: bridge}
	n.Netns = n.name + "-net"
	defer func() {
		if err != nil {
			n.Close()
			n = nil
		}
	}()
	if err := n.addNS(ctx, n.Netns); err != nil {
		return n, err
	}
	for _, s := range [][]string{
		{"ip", "link", "add", bridge, "type", "bridge"},
		{"ip", "addr", "add", addr.String(), "dev", bridge},
		{"ip", "link", "set", bridge, "up"},
	} {
		if _, err := netns.Run(ctx, n.Netns, s[0], s[1:]...); err != nil {
			return n, err
		}
	}
	return n, nil
}

func (n *Net) addNS(ctx context.Context, name string) error {
	if _, err := netns.Run(ctx, "", "ip", "netns", "add", name); err != nil {
		return err
	}
	n.onClose(func() { _, _ = netns.Run(context.Background(), "", "ip", "netns", "del", name) }) //nolint:forbidigo // cleanup
	_, err := netns.Run(ctx, name, "ip", "link", "set", "lo", "up")
	return err
}

func (n *Net) onClose(f func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closers = append(n.closers, f)
}

// Close stops what runs and deletes every namespace.
func (n *Net) Close() {
	n.mu.Lock()
	cs := n.closers
	n.closers = nil
	n.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}

// OnClose runs f at Close (before the namespaces go).
func (n *Net) OnClose(f func()) { n.onClose(f) }

// Existing returns a Net for a bridge in a namespace someone else made
// (the DHCP agent, QemuMachine): Close removes only the clients.
func Existing(netnsName, bridge string) *Net {
	return &Net{Netns: netnsName, Bridge: bridge, name: fmt.Sprintf("%s%d-%d", prefix, os.Getpid(), seq.Add(1))}
}

// AddClient makes a client namespace whose eth0 has mac, is up and has no
// IPv4 address, on the bridge. It returns the namespace's name.
func (n *Net) AddClient(ctx context.Context, mac string) (string, error) {
	n.mu.Lock()
	n.n++
	i := n.n
	n.mu.Unlock()
	name := n.name + "-c" + strconv.Itoa(i)
	if err := n.addNS(ctx, name); err != nil {
		return "", err
	}
	peer := "v" + strconv.Itoa(i)
	for _, s := range [][]string{
		{n.Netns, "ip", "link", "add", peer, "type", "veth", "peer", "name", "eth0", "netns", name},
		{n.Netns, "ip", "link", "set", peer, "master", n.Bridge, "up"},
		{name, "ip", "link", "set", "eth0", "address", mac},
		{name, "ip", "link", "set", "eth0", "up"},
	} {
		if _, err := netns.Run(ctx, s[0], s[1], s[2:]...); err != nil {
			return "", err
		}
	}
	return name, nil
}

// Sweep deletes namespaces left by dead processes of earlier runs.
func Sweep(ctx context.Context) {
	entries, _ := os.ReadDir(netns.Dir)
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(strings.SplitN(rest, "-", 2)[0])
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue
		}
		_, _ = netns.Run(ctx, "", "ip", "netns", "del", e.Name())
	}
}
