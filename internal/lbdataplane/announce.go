package lbdataplane

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/converge-dev/converge/internal/netns"
)

// Label marks the virtual IPs the agent adds to the loopback interface.
// Linux answers ARP on every interface for any local address (arp_ignore=0),
// so an address on lo is answered for on the announce interface; the label
// lets the agent list and remove exactly its own addresses, also after a
// crash. (A dummy interface would do too, but not every kernel has it.)
const Label = "lo:cvglb"

// Addresses manages the VIPs on the loopback interface of one namespace.
type Addresses struct {
	NetNS string
}

// Ensure brings the loopback interface up.
func (a Addresses) Ensure(ctx context.Context) error {
	_, err := netns.Run(ctx, a.NetNS, "ip", "link", "set", "lo", "up")
	return err
}

// List returns the VIPs the agent added.
func (a Addresses) List(ctx context.Context) ([]netip.Addr, error) {
	out, err := netns.Run(ctx, a.NetNS, "ip", "-o", "-4", "addr", "show", "dev", "lo", "label", Label)
	if err != nil {
		return nil, err
	}
	var ips []netip.Addr
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "inet" {
				if p, err := netip.ParsePrefix(f[i+1]); err == nil {
					ips = append(ips, p.Addr())
				}
			}
		}
	}
	return ips, nil
}

// Add puts VIPs on the loopback interface, all in one run of ip(8)
// (-batch), so a node taking over many addresses does not start a process
// per address. On error the ones before the failing line were added.
func (a Addresses) Add(ctx context.Context, ips ...netip.Addr) error {
	if len(ips) == 0 {
		return nil
	}
	var b strings.Builder
	for _, ip := range ips {
		fmt.Fprintf(&b, "addr replace %s/32 dev lo label %s\n", ip, Label)
	}
	cmd := netns.Command(ctx, a.NetNS, "ip", "-batch", "-")
	cmd.Stdin = strings.NewReader(b.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("adding %d addresses to lo in netns %q: %w: %s", len(ips), a.NetNS, err, out)
	}
	return nil
}

// Remove takes a VIP off.
func (a Addresses) Remove(ctx context.Context, ip netip.Addr) error {
	_, err := netns.Run(ctx, a.NetNS, "ip", "addr", "del", ip.String()+"/32", "dev", "lo")
	return err
}

// Delete removes every VIP the agent added.
func (a Addresses) Delete(ctx context.Context) error {
	ips, err := a.List(ctx)
	if err != nil {
		return err
	}
	for _, ip := range ips {
		if err := a.Remove(ctx, ip); err != nil {
			return err
		}
	}
	return nil
}

// GratuitousARP broadcasts an ARP request for each ip from that ip on the
// interface, so neighbours update their caches at once on takeover instead
// of waiting minutes for the old entry to go stale. One socket sends them
// all: a node taking over many addresses announces them in microseconds.
func GratuitousARP(nsName, iface string, ips ...netip.Addr) error {
	if len(ips) == 0 {
		return nil
	}
	return netns.Do(nsName, func() error {
		ifi, err := net.InterfaceByName(iface)
		if err != nil {
			return fmt.Errorf("interface %q: %w", iface, err)
		}
		if len(ifi.HardwareAddr) != 6 {
			return fmt.Errorf("interface %q has no Ethernet address", iface)
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ARP)))
		if err != nil {
			return fmt.Errorf("opening a packet socket (needs CAP_NET_RAW): %w", err)
		}
		defer unix.Close(fd)
		bcast := [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
		sa := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: ifi.Index, Halen: 6, Addr: bcast}
		var errs []error
		for _, ip := range ips {
			if err := unix.Sendto(fd, garpFrame(ifi.HardwareAddr, ip), 0, sa); err != nil {
				errs = append(errs, fmt.Errorf("sending gratuitous ARP for %s on %s: %w", ip, iface, err))
			}
		}
		return errors.Join(errs...)
	})
}

// garpFrame is an Ethernet broadcast ARP request asking for ip from ip.
func garpFrame(mac net.HardwareAddr, ip netip.Addr) []byte {
	bcast := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	frame := make([]byte, 0, 42)
	frame = append(frame, bcast...)
	frame = append(frame, mac...)
	frame = binary.BigEndian.AppendUint16(frame, unix.ETH_P_ARP)
	frame = binary.BigEndian.AppendUint16(frame, 1)      // Ethernet
	frame = binary.BigEndian.AppendUint16(frame, 0x0800) // IPv4
	frame = append(frame, 6, 4)
	frame = binary.BigEndian.AppendUint16(frame, 1) // request
	v4 := ip.As4()
	frame = append(frame, mac...)
	frame = append(frame, v4[:]...)
	frame = append(frame, 0, 0, 0, 0, 0, 0)
	frame = append(frame, v4[:]...)
	return frame
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
