package ipmi

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/converge-dev/converge/internal/testpeer"
)

// fakeBackend is a machine in memory.
type fakeBackend struct {
	mu         sync.Mutex
	user, pass string
	on         bool
	dev        BootDevice
	persistent bool
	calls      []string
}

func (f *fakeBackend) Credentials() (string, string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.user, f.pass, f.user != ""
}

func (f *fakeBackend) PoweredOn(context.Context) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.on, nil
}

func (f *fakeBackend) Chassis(_ context.Context, a ChassisAction, c Caller) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, a.String()+" from "+c.Addr+" as "+c.User)
	switch a {
	case PowerUp, PowerCycle, HardReset:
		f.on = true
	case PowerDown, SoftShutdown:
		f.on = false
	}
	return nil
}

func (f *fakeBackend) SetBoot(_ context.Context, d BootDevice, persistent bool, _ Caller) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dev, f.persistent = d, persistent
	return nil
}

func (f *fakeBackend) Boot(context.Context) (BootDevice, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dev, f.persistent, nil
}

func (f *fakeBackend) setPassword(p string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pass = p
}

func startServer(t *testing.T) (*Server, *fakeBackend, string) {
	t.Helper()
	b := &fakeBackend{user: "admin", pass: "s3cret", on: true, dev: BootNone}
	var skew atomic.Int64
	s := &Server{Backend: b, GUID: [16]byte{1, 2, 3}, now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }}
	s.skew = &skew
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(ctx, conn) }()
	t.Cleanup(func() { cancel(); <-done })
	return s, b, conn.LocalAddr().String()
}

func ipmitool(t *testing.T, addr, pass, suite string, args ...string) (string, error) {
	t.Helper()
	h, p, _ := net.SplitHostPort(addr)
	a := append([]string{"-I", "lanplus", "-C", suite, "-H", h, "-p", p, "-U", "admin", "-P", pass, "-R", "1", "-N", "2"}, args...)
	out, err := exec.CommandContext(t.Context(), "ipmitool", a...).CombinedOutput()
	return string(out), err
}

func TestIpmitool(t *testing.T) {
	testpeer.NeedTool(t, "ipmitool", "ipmitool")
	for _, suite := range []string{"3", "17"} {
		t.Run("C"+suite, func(t *testing.T) {
			_, b, addr := startServer(t)
			run := func(args ...string) string {
				t.Helper()
				out, err := ipmitool(t, addr, "s3cret", suite, args...)
				if err != nil {
					t.Fatalf("ipmitool %v: %v\n%s", args, err, out)
				}
				return out
			}
			if out := run("power", "status"); !strings.Contains(out, "Chassis Power is on") {
				t.Fatalf("power status: %q", out)
			}
			if out := run("mc", "info"); !strings.Contains(out, "IPMI Version              : 2.0") {
				t.Fatalf("mc info: %q", out)
			}
			run("power", "off")
			if out := run("power", "status"); !strings.Contains(out, "Chassis Power is off") {
				t.Fatalf("power status after off: %q", out)
			}
			run("power", "on")
			run("power", "cycle")
			run("power", "reset")
			run("power", "soft")
			run("chassis", "bootdev", "pxe")
			if d, p, _ := b.Boot(t.Context()); d != BootPXE || p {
				t.Fatalf("boot = %s persistent=%v, want pxe once", d, p)
			}
			run("chassis", "bootdev", "cdrom", "options=persistent,efiboot")
			if d, p, _ := b.Boot(t.Context()); d != BootCDROM || !p {
				t.Fatalf("boot = %s persistent=%v, want cdrom persistent", d, p)
			}
			run("chassis", "bootdev", "disk")
			if out := run("chassis", "bootparam", "get", "5"); !strings.Contains(out, "Force Boot from default Hard-Drive") {
				t.Fatalf("bootparam get 5: %q", out)
			}
			if out := run("chassis", "status"); !strings.Contains(out, "System Power         : off") {
				t.Fatalf("chassis status: %q", out)
			}
			b.mu.Lock()
			calls := strings.Join(b.calls, "; ")
			b.mu.Unlock()
			if !strings.Contains(calls, "power off from 127.0.0.1 as admin") {
				t.Fatalf("calls: %s", calls)
			}
		})
	}
}

func TestIpmitoolWrongPassword(t *testing.T) {
	testpeer.NeedTool(t, "ipmitool", "ipmitool")
	s, b, addr := startServer(t)
	for _, suite := range []string{"3", "17"} {
		out, err := ipmitool(t, addr, "wrong", suite, "power", "off")
		if err == nil {
			t.Fatalf("a wrong password was accepted: %s", out)
		}
	}
	if len(b.calls) != 0 {
		t.Fatalf("a command went through: %v", b.calls)
	}
	// ipmitool gives up at RAKP 2 (the BMC's code does not match its
	// password): the half-open sessions expire.
	s.skew.Add(int64(DefaultHandshakeTimeout + time.Second))
	if n := s.Sessions(); n != 0 {
		t.Fatalf("%d sessions left after the handshake timeout", n)
	}
}

func TestGoClient(t *testing.T) {
	ctx := t.Context()
	s, b, addr := startServer(t)
	for _, suite := range []byte{CipherSuite3, CipherSuite17} {
		c, err := Dial(ctx, addr, "admin", "s3cret", suite)
		if err != nil {
			t.Fatalf("suite %d: %v", suite, err)
		}
		id, err := c.DeviceID(ctx)
		if err != nil || id[4] != 0x02 {
			t.Fatalf("device ID = %x, %v", id, err)
		}
		if err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if s.Sessions() != 0 {
		t.Fatalf("Close Session left %d sessions", s.Sessions())
	}
	// Wrong password: RAKP 2 does not verify at the client; wrong user:
	// RAKP 2 carries "unauthorized name".
	if _, err := Dial(ctx, addr, "admin", "nope", CipherSuite3); err == nil {
		t.Fatal("wrong password accepted")
	}
	_, err := Dial(ctx, addr, "root", "s3cret", CipherSuite3)
	var se *StatusError
	if !errors.As(err, &se) || se.Status != statusUnauthorizedName {
		t.Fatalf("wrong user: %v", err)
	}
	// Rotation: the old password stops working at the next session.
	b.setPassword("n3w")
	if _, err := Dial(ctx, addr, "admin", "s3cret", CipherSuite17); err == nil {
		t.Fatal("old password accepted after rotation")
	}
	c, err := Dial(ctx, addr, "admin", "n3w", CipherSuite17)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close(ctx)
}

func TestIpmipower(t *testing.T) {
	testpeer.NeedTool(t, "ipmipower", "freeipmi-tools")
	_, b, addr := startServer(t)
	for _, suite := range []string{"3", "17"} {
		run := func(arg string) string {
			t.Helper()
			out, err := exec.CommandContext(t.Context(), "ipmipower", "-D", "LAN_2_0", "-I", suite, "-h", addr,
				"-u", "admin", "-p", "s3cret", "--session-timeout=5000", "--retransmission-timeout=500", arg).CombinedOutput()
			if err != nil {
				t.Fatalf("ipmipower %s: %v\n%s", arg, err, out)
			}
			return string(out)
		}
		if out := run("--off"); !strings.Contains(out, ": ok") {
			t.Fatalf("ipmipower --off: %q", out)
		}
		if out := run("--stat"); !strings.Contains(out, ": off") {
			t.Fatalf("ipmipower --stat: %q", out)
		}
		run("--on")
		if on, _ := b.PoweredOn(t.Context()); !on {
			t.Fatal("ipmipower --on did not power on")
		}
	}
	out, _ := exec.CommandContext(t.Context(), "ipmipower", "-D", "LAN_2_0", "-I", "3", "-h", addr,
		"-u", "admin", "-p", "wrong", "--session-timeout=3000", "--stat").CombinedOutput()
	if !strings.Contains(string(out), "password invalid") {
		t.Fatalf("ipmipower with a wrong password: %q", out)
	}
}
