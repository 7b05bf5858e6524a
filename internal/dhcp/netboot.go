package dhcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/converge-dev/converge/internal/netns"
	"github.com/converge-dev/converge/internal/qemu"
)

// DefaultNetBootPort is the network boot server's default port
// (--netboot-http-port).
const DefaultNetBootPort = 8069

// ErrNoMachine says no Machine of the pool's namespace has the MAC address
// right now.
var ErrNoMachine = errors.New("no Machine of the pool's namespace has this MAC address")

// BootTarget is the Machine a MAC address boots as.
type BootTarget struct {
	// Namespace and Name are the Machine's.
	Namespace, Name string
	// Image is the Machine's spec.image now.
	Image string
	// Object is the Machine, for Events.
	Object runtime.Object
}

// BootServer is the network boot HTTP server of one network: on each
// network boot pool's server address (inside Netns) it serves
//
//   - GET /boot/<mac>.ipxe: an iPXE script booting the kernel and initrd of
//     the image the Machine owning <mac> has in spec.image right now, with
//     qemu.KernelCmdline;
//   - GET /images/<image>/vmlinuz and /images/<image>/initrd.gz: those files
//     from the image store, checked as QemuMachine checks them
//     (qemu.ImageFile: no path, "..", or symlink out of the store).
//
// Every request must come from the address the agent leased to a MAC
// address of the pool the listener belongs to, and the MAC must belong to
// a Machine of the pool's namespace (the script: the MAC named in the path;
// the files: the requester's, whose Machine's spec.image must be <image>).
// Anything else is 404, so a pool boots only its own namespace's Machines,
// and a machine fetches only the image it boots.
type BootServer struct {
	// Netns is the network namespace the listeners are opened in.
	Netns string
	// ImageDir is the image store.
	ImageDir string
	// Table returns the network's current allocations.
	Table func() *Table
	// Machine returns the Machine of namespace that has a NIC with mac now
	// (mac is lowercase), or ErrNoMachine.
	Machine func(ctx context.Context, namespace, mac string) (BootTarget, error)
	// Served, when set, is called after a boot script was served.
	Served func(ctx context.Context, t BootTarget)
	// Log receives one line per request refused or failed.
	Log logr.Logger

	mu        sync.Mutex
	listeners map[netip.AddrPort]*http.Server
}

// Sync makes the server listen on exactly addrs: it opens the listeners
// missing (inside Netns; the addresses must be on an interface there) and
// closes the others.
func (b *BootServer) Sync(addrs []netip.AddrPort) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.listeners == nil {
		b.listeners = map[netip.AddrPort]*http.Server{}
	}
	want := map[netip.AddrPort]bool{}
	var errs []error
	for _, a := range addrs {
		want[a] = true
		if _, ok := b.listeners[a]; ok {
			continue
		}
		var ln net.Listener
		if err := netns.Do(b.Netns, func() (err error) {
			ln, err = net.Listen("tcp", a.String())
			return err
		}); err != nil {
			errs = append(errs, fmt.Errorf("opening the network boot server on %s (netns %q): %w", a, b.Netns, err))
			continue
		}
		srv := &http.Server{
			Handler:           b.Handler(),
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       time.Minute,
		}
		go func() { _ = srv.Serve(ln) }()
		b.listeners[a] = srv
	}
	for a, srv := range b.listeners {
		if !want[a] {
			_ = srv.Close()
			delete(b.listeners, a)
		}
	}
	return errors.Join(errs...)
}

// Addrs returns the addresses listened on.
func (b *BootServer) Addrs() []netip.AddrPort {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]netip.AddrPort, 0, len(b.listeners))
	for a := range b.listeners {
		out = append(out, a)
	}
	return out
}

// Close closes every listener.
func (b *BootServer) Close() error {
	return b.Sync(nil)
}

// Handler is the server's HTTP handler; it needs the connection's local
// and remote addresses (http.LocalAddrContextKey and RemoteAddr).
func (b *BootServer) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /boot/{file}", b.script)
	mux.HandleFunc("GET /images/{image}/{file}", b.file)
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		netbootRequests.WithLabelValues("other", "404").Inc()
		http.NotFound(w, nil)
	})
	return mux
}

// caller is who sent a request: the lease of its address in the pool
// whose server address received it, and its Machine.
type caller struct {
	mac    string
	lease  Lease
	server netip.AddrPort
}

// localServer is the address (and port) the request reached.
func (b *BootServer) localServer(r *http.Request) (netip.AddrPort, bool) {
	la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return netip.AddrPort{}, false
	}
	ap, err := netip.ParseAddrPort(la.String())
	if err != nil {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), true
}

// who finds the lease of the MAC address mac (or, when mac is empty, of
// the requester's address) and checks that the requester holds it and
// that its pool is the one served on the address the request reached,
// with network boot enabled.
func (b *BootServer) who(r *http.Request, mac string) (caller, string) {
	server, ok := b.localServer(r)
	if !ok {
		return caller{}, "no local address"
	}
	remote, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return caller{}, "unparsable remote address " + r.RemoteAddr
	}
	from := remote.Addr().Unmap()
	t := b.Table()
	var l Lease
	if mac == "" {
		mac, l, ok = t.LookupIP(from)
		if !ok {
			return caller{}, "no lease holds " + from.String()
		}
	} else if l, ok = t.Lookup(mac); !ok {
		return caller{}, "no lease for " + mac
	}
	switch {
	case l.IP != from:
		return caller{}, fmt.Sprintf("%s asked for the boot script of %s, which holds %s", from, mac, l.IP)
	case l.Options.NetBootPort == 0:
		return caller{}, "pool " + l.Options.Pool + " has network boot disabled"
	case l.Options.Server != server.Addr() || l.Options.NetBootPort != int(server.Port()):
		return caller{}, fmt.Sprintf("%s belongs to pool %s, not to the one served on %s", mac, l.Options.Pool, server)
	}
	return caller{mac: mac, lease: l, server: server}, ""
}

func (b *BootServer) refuse(w http.ResponseWriter, file, why string) {
	b.Log.V(1).Info("Refusing a network boot request", "file", file, "why", why)
	netbootRequests.WithLabelValues(file, "404").Inc()
	http.NotFound(w, nil)
}

// target is the Machine of the caller with an image whose kernel and
// initrd are in the store.
func (b *BootServer) target(ctx context.Context, c caller) (BootTarget, string) {
	t, err := b.Machine(ctx, c.lease.Options.Namespace, c.mac)
	if err != nil {
		return BootTarget{}, fmt.Sprintf("%s in namespace %s: %v", c.mac, c.lease.Options.Namespace, err)
	}
	for _, f := range []string{qemu.KernelFile, qemu.InitrdFile} {
		if _, err := qemu.ImageFile(b.ImageDir, t.Image, f); err != nil {
			return BootTarget{}, fmt.Sprintf("Machine %s/%s: %v", t.Namespace, t.Name, err)
		}
	}
	return t, ""
}

func (b *BootServer) script(w http.ResponseWriter, r *http.Request) {
	const label = "script"
	name, ok := strings.CutSuffix(r.PathValue("file"), ".ipxe")
	hw, err := net.ParseMAC(name)
	if !ok || err != nil || len(hw) != 6 {
		b.refuse(w, label, "not a MAC address: "+r.PathValue("file"))
		return
	}
	c, why := b.who(r, hw.String())
	if why != "" {
		b.refuse(w, label, why)
		return
	}
	t, why := b.target(r.Context(), c)
	if why != "" {
		b.refuse(w, label, why)
		return
	}
	base := "http://" + c.server.String() + "/images/" + t.Image + "/"
	body := "#!ipxe\n" +
		"kernel " + base + qemu.KernelFile + " " + qemu.KernelCmdline + "\n" +
		"initrd " + base + qemu.InitrdFile + "\n" +
		"boot\n"
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(body))
	netbootRequests.WithLabelValues(label, "200").Inc()
	b.Log.Info("Served a network boot script", "Machine", t.Namespace+"/"+t.Name, "image", t.Image, "mac", c.mac)
	if b.Served != nil {
		b.Served(r.Context(), t)
	}
}

func (b *BootServer) file(w http.ResponseWriter, r *http.Request) {
	image, file := r.PathValue("image"), r.PathValue("file")
	label := file
	if file != qemu.KernelFile && file != qemu.InitrdFile {
		b.refuse(w, "other", "not an image file: "+file)
		return
	}
	c, why := b.who(r, "")
	if why != "" {
		b.refuse(w, label, why)
		return
	}
	t, why := b.target(r.Context(), c)
	if why != "" {
		b.refuse(w, label, why)
		return
	}
	if t.Image != image {
		b.refuse(w, label, fmt.Sprintf("Machine %s/%s boots image %q, not %q", t.Namespace, t.Name, t.Image, image))
		return
	}
	p, err := qemu.ImageFile(b.ImageDir, image, file)
	if err != nil {
		b.refuse(w, label, err.Error())
		return
	}
	f, err := os.Open(p) //nolint:gosec // p was checked to be a file inside the image store
	if err != nil {
		b.refuse(w, label, err.Error())
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		netbootRequests.WithLabelValues(label, "500").Inc()
		http.Error(w, "stat failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
	http.ServeContent(rec, r, file, st.ModTime(), f)
	netbootRequests.WithLabelValues(label, strconv.Itoa(rec.code)).Inc()
}

// statusRecorder remembers the status code written.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}
