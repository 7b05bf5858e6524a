package dhcp_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/converge-dev/converge/internal/dhcp"
	"github.com/converge-dev/converge/internal/qemu"
)

const bootPort = 8069

func bootOpts(port int) *dhcp.Options {
	o := opts(time.Hour)
	o.Namespace = "ns"
	o.NetBootPort = port
	return o
}

// ipxe is what QEMU's iPXE ROM adds to its DHCP messages: the user class
// "iPXE" (option 77, sent as a plain string, not RFC 3004) and its
// encapsulated options (175).
func ipxe(t *testing.T, m *dhcpv4.DHCPv4, userClass, etherboot bool) *dhcpv4.DHCPv4 {
	t.Helper()
	if userClass {
		dhcpv4.WithUserClass("iPXE", false)(m)
	}
	if etherboot {
		dhcpv4.WithGeneric(dhcpv4.OptionEtherboot, []byte{0x15, 0x01, 0x01})(m) // 21 = HTTP supported
	}
	// Through the wire format and back, as the agent gets it.
	p, err := dhcpv4.FromBytes(m.ToBytes())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func request(t *testing.T, offer *dhcpv4.DHCPv4, userClass bool) *dhcpv4.DHCPv4 {
	t.Helper()
	req, err := dhcpv4.NewRequestFromOffer(offer)
	if err != nil {
		t.Fatal(err)
	}
	return ipxe(t, req, userClass, false)
}

// An iPXE client with an allocation in a network boot pool gets the boot
// script URL as option 67 (and in the BOOTP file field) in the OFFER and
// the ACK, with siaddr the server; iPXE is recognised by its user class or
// by its option 175 alone.
func TestNetBootOptionsForIPXE(t *testing.T) {
	o := bootOpts(bootPort)
	s := &dhcp.Server{}
	s.SetTable(table(o))
	want := "http://10.66.0.2:8069/boot/" + macA + ".ipxe"
	for _, c := range []struct {
		name                 string
		userClass, etherboot bool
	}{{"user class", true, false}, {"option 175", false, true}, {"both", true, true}} {
		t.Run(c.name, func(t *testing.T) {
			offer := s.Handle(ipxe(t, discover(t, macA), c.userClass, c.etherboot))
			if offer == nil || offer.MessageType() != dhcpv4.MessageTypeOffer {
				t.Fatalf("offer = %v", offer)
			}
			if got := offer.BootFileNameOption(); got != want {
				t.Errorf("offer option 67 = %q, want %q", got, want)
			}
			if offer.BootFileName != want {
				t.Errorf("offer file field = %q, want %q", offer.BootFileName, want)
			}
			if !offer.ServerIPAddr.Equal(net.ParseIP("10.66.0.2")) {
				t.Errorf("siaddr = %s", offer.ServerIPAddr)
			}
			// The reply survives the library's encoding.
			back, err := dhcpv4.FromBytes(offer.ToBytes())
			if err != nil || back.BootFileNameOption() != want {
				t.Fatalf("decoded offer: %v, option 67 %q", err, back.BootFileNameOption())
			}
			ack := s.Handle(request(t, offer, c.userClass || c.etherboot))
			if ack == nil || ack.MessageType() != dhcpv4.MessageTypeAck || ack.BootFileNameOption() != want {
				t.Fatalf("ack = %v", ack)
			}
		})
	}
}

// Clients that are not iPXE (udhcpc, dhclient, a PXE ROM that is not
// iPXE) get byte for byte what a pool without network boot gives them;
// an iPXE client of a pool without network boot gets no boot file either;
// an unknown MAC gets nothing, iPXE or not.
func TestNetBootOptionsOnlyForIPXEOfBootPools(t *testing.T) {
	boot, plain := &dhcp.Server{}, &dhcp.Server{}
	boot.SetTable(table(bootOpts(bootPort)))
	plain.SetTable(table(bootOpts(0)))

	d := discover(t, macA)
	dhcpv4.WithUserClass("udhcp 1.35.0", false)(d) // not iPXE
	d, _ = dhcpv4.FromBytes(d.ToBytes())
	ob, op := boot.Handle(d), plain.Handle(d)
	if ob == nil || op == nil {
		t.Fatal("no offer")
	}
	if !bytes.Equal(ob.ToBytes(), op.ToBytes()) {
		t.Errorf("a non-iPXE client's offer differs with network boot:\n%s\n%s", ob.Summary(), op.Summary())
	}
	if ob.Options.Has(dhcpv4.OptionBootfileName) || ob.BootFileName != "" {
		t.Errorf("a non-iPXE client got a boot file: %s", ob.Summary())
	}
	req := request(t, ob, false)
	ab, ap := boot.Handle(req), plain.Handle(req)
	if ab == nil || ap == nil || !bytes.Equal(ab.ToBytes(), ap.ToBytes()) || ab.Options.Has(dhcpv4.OptionBootfileName) {
		t.Errorf("a non-iPXE client's ack differs with network boot or has a boot file")
	}

	if o := plain.Handle(ipxe(t, discover(t, macA), true, true)); o == nil || o.Options.Has(dhcpv4.OptionBootfileName) || o.BootFileName != "" {
		t.Errorf("iPXE in a pool without network boot got %v", o)
	}
	if o := boot.Handle(ipxe(t, discover(t, macB), true, true)); o != nil {
		t.Errorf("an unknown iPXE client got %s", o.Summary())
	}
}

// bootEnv is a BootServer on loopback: the pool's server address is
// 127.0.0.2, the client's lease 127.0.0.3 (any 127/8 address is local).
type bootEnv struct {
	t        *testing.T
	store    string
	machines map[string]dhcp.BootTarget // by MAC; namespace "ns"
	served   []string
	base     string
}

func newBootEnv(t *testing.T) *bootEnv {
	t.Helper()
	e := &bootEnv{t: t, store: t.TempDir(), machines: map[string]dhcp.BootTarget{}}
	o := bootOpts(0)
	o.Server = netip.MustParseAddr("127.0.0.2")
	o.Prefix = netip.MustParsePrefix("127.0.0.0/8")
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	o.NetBootPort = ln.Addr().(*net.TCPAddr).Port
	tbl := dhcp.NewTable([]*dhcp.Options{o}, map[string]dhcp.Lease{
		macA: {IP: netip.MustParseAddr("127.0.0.3"), Options: o},
	})
	b := &dhcp.BootServer{
		ImageDir: e.store,
		Table:    func() *dhcp.Table { return tbl },
		Machine: func(_ context.Context, ns, mac string) (dhcp.BootTarget, error) {
			m, ok := e.machines[mac]
			if !ok || ns != m.Namespace {
				return dhcp.BootTarget{}, dhcp.ErrNoMachine
			}
			return m, nil
		},
		Served: func(_ context.Context, tg dhcp.BootTarget) { e.served = append(e.served, tg.Image) },
	}
	srv := &http.Server{Handler: b.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	e.base = "http://" + ln.Addr().String()
	e.image("busybox", "kernel-1", "initrd-1")
	e.image("other", "kernel-other", "initrd-other")
	return e
}

func (e *bootEnv) image(name, kernel, initrd string) {
	e.t.Helper()
	d := filepath.Join(e.store, name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		e.t.Fatal(err)
	}
	for f, s := range map[string]string{qemu.KernelFile: kernel, qemu.InitrdFile: initrd} {
		if err := os.WriteFile(filepath.Join(d, f), []byte(s), 0o644); err != nil {
			e.t.Fatal(err)
		}
	}
}

// get sends a raw GET (the path as given, not cleaned) from the local
// address from.
func (e *bootEnv) get(from, path string) (int, string) {
	e.t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c := &http.Client{
		Transport:     &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       10 * time.Second,
	}
	req, err := http.NewRequestWithContext(e.t.Context(), http.MethodGet, e.base+"/", nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.URL.Opaque = path // sent verbatim
	resp, err := c.Do(req)
	if err != nil {
		e.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The boot script names the Machine's current image, with QEMU's direct
// kernel boot command line; the files are that image's; a change of the
// Machine's image changes the next script.
func TestBootServerServesTheMachinesCurrentImage(t *testing.T) {
	e := newBootEnv(t)
	e.machines[macA] = dhcp.BootTarget{Namespace: "ns", Name: "vm", Image: "busybox"}
	code, body := e.get("127.0.0.3", "/boot/"+macA+".ipxe")
	want := "#!ipxe\nkernel " + e.base + "/images/busybox/vmlinuz " + qemu.KernelCmdline + "\ninitrd " + e.base + "/images/busybox/initrd.gz\nboot\n"
	if code != http.StatusOK || body != want {
		t.Fatalf("script: %d %q, want %q", code, body, want)
	}
	if code, body := e.get("127.0.0.3", "/boot/"+strings.ToUpper(macA)+".ipxe"); code != http.StatusOK || body != want {
		t.Errorf("upper-case MAC: %d %q", code, body)
	}
	if code, body := e.get("127.0.0.3", "/images/busybox/vmlinuz"); code != http.StatusOK || body != "kernel-1" {
		t.Errorf("kernel: %d %q", code, body)
	}
	if code, body := e.get("127.0.0.3", "/images/busybox/initrd.gz"); code != http.StatusOK || body != "initrd-1" {
		t.Errorf("initrd: %d %q", code, body)
	}
	e.machines[macA] = dhcp.BootTarget{Namespace: "ns", Name: "vm", Image: "other"}
	if code, body := e.get("127.0.0.3", "/boot/"+macA+".ipxe"); code != http.StatusOK || !strings.Contains(body, "/images/other/vmlinuz") {
		t.Errorf("after the image changed: %d %q", code, body)
	}
	if code, _ := e.get("127.0.0.3", "/images/busybox/vmlinuz"); code != http.StatusNotFound {
		t.Errorf("the previous image is still served: %d", code)
	}
	if strings.Join(e.served, ",") != "busybox,busybox,other" {
		t.Errorf("served = %v", e.served)
	}
}

// Unknown MACs, MACs whose Machine is in another namespace, requests from
// an address that does not hold the MAC's lease, and images the store
// lacks are 404.
func TestBootServerNotFound(t *testing.T) {
	e := newBootEnv(t)
	if code, _ := e.get("127.0.0.3", "/boot/"+macB+".ipxe"); code != http.StatusNotFound {
		t.Errorf("unknown MAC: %d", code)
	}
	if code, _ := e.get("127.0.0.3", "/boot/"+macA+".ipxe"); code != http.StatusNotFound {
		t.Errorf("MAC without a Machine: %d", code)
	}
	e.machines[macA] = dhcp.BootTarget{Namespace: "other-tenant", Name: "vm", Image: "busybox"}
	if code, _ := e.get("127.0.0.3", "/boot/"+macA+".ipxe"); code != http.StatusNotFound {
		t.Errorf("Machine of another namespace: %d", code)
	}
	e.machines[macA] = dhcp.BootTarget{Namespace: "ns", Name: "vm", Image: "busybox"}
	if code, _ := e.get("127.0.0.4", "/boot/"+macA+".ipxe"); code != http.StatusNotFound {
		t.Errorf("from an address that does not hold the lease: %d", code)
	}
	if code, _ := e.get("127.0.0.4", "/images/busybox/vmlinuz"); code != http.StatusNotFound {
		t.Errorf("a file from an address without a lease: %d", code)
	}
	e.machines[macA] = dhcp.BootTarget{Namespace: "ns", Name: "vm", Image: "missing"}
	if code, _ := e.get("127.0.0.3", "/boot/"+macA+".ipxe"); code != http.StatusNotFound {
		t.Errorf("image not in the store: %d", code)
	}
	if code, _ := e.get("127.0.0.3", "/boot/not-a-mac.ipxe"); code != http.StatusNotFound {
		t.Errorf("not a MAC: %d", code)
	}
	if len(e.served) != 0 {
		t.Errorf("served = %v", e.served)
	}
}

// The attack: a tenant names in spec.image, or asks the server for, an
// image that leads out of the image store (a path, "..", encoded slashes,
// a symlinked image directory or file pointing outside, another file of
// the image directory), or another image of the store than its Machine's.
// Nothing outside the store, and no other image, is ever served.
func TestBootServerRefusesPathTraversalAndSymlinkEscape(t *testing.T) {
	e := newBootEnv(t)
	outside := t.TempDir()
	const secret = "SECRET-OUTSIDE-THE-STORE"
	for _, f := range []string{qemu.KernelFile, qemu.InitrdFile, "passwd"} {
		if err := os.WriteFile(filepath.Join(outside, f), []byte(secret), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(e.store, "escape")); err != nil {
		t.Fatal(err)
	}
	e.image("linked", "k", "i")
	if err := os.Remove(filepath.Join(e.store, "linked", qemu.KernelFile)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, qemu.KernelFile), filepath.Join(e.store, "linked", qemu.KernelFile)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.store, "busybox", "notes"), []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}

	for _, image := range []string{"escape", "linked", "../" + filepath.Base(outside), "busybox/../escape", "/etc", ".", ".."} {
		e.machines[macA] = dhcp.BootTarget{Namespace: "ns", Name: "vm", Image: image}
		if code, body := e.get("127.0.0.3", "/boot/"+macA+".ipxe"); code == http.StatusOK || strings.Contains(body, secret) {
			t.Errorf("spec.image %q: script served: %d %q", image, code, body)
		}
		for _, f := range []string{qemu.KernelFile, qemu.InitrdFile} {
			if code, body := e.get("127.0.0.3", "/images/"+image+"/"+f); code == http.StatusOK || strings.Contains(body, secret) {
				t.Errorf("spec.image %q: %s served: %d %q", image, f, code, body)
			}
		}
	}
	e.machines[macA] = dhcp.BootTarget{Namespace: "ns", Name: "vm", Image: "busybox"}
	for _, p := range []string{
		"/images/other/vmlinuz", // another image of the store
		"/images/busybox/notes", // another file of the image
		"/images/busybox/../escape/vmlinuz",
		"/images/..%2f..%2f" + strings.TrimPrefix(outside, "/") + "/vmlinuz",
		"/images/busybox/..%2f..%2fescape%2fvmlinuz",
		"/images/escape/vmlinuz",
		"/images/busybox%2f..%2fescape/vmlinuz",
		"/boot/../images/escape/vmlinuz",
		"/images/" + outside + "/passwd",
	} {
		if code, body := e.get("127.0.0.3", p); code == http.StatusOK || strings.Contains(body, secret) || strings.Contains(body, "kernel-other") {
			t.Errorf("GET %s: %d %q", p, code, body)
		}
	}
	// The legitimate file is still served: the refusals above are not a
	// broken server.
	if code, body := e.get("127.0.0.3", "/images/busybox/vmlinuz"); code != http.StatusOK || body != "kernel-1" {
		t.Errorf("kernel: %d %q", code, body)
	}
	var ie *qemu.ImageError
	if _, err := qemu.ImageFile(e.store, "escape", qemu.KernelFile); !errors.As(err, &ie) {
		t.Errorf("ImageFile(escape) = %v", err)
	}
}
