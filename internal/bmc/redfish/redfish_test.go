package redfish

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/converge-dev/converge/internal/testpeer"
)

type fakeBackend struct {
	mu         sync.Mutex
	user, pass string
	sys        System
	rv         int
	calls      []string
}

func (f *fakeBackend) Credentials() (string, string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.user, f.pass, f.user != ""
}

func (f *fakeBackend) System(context.Context) (System, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sys
	s.ETag = fmt.Sprintf(`W/"%d"`, f.rv)
	return s, nil
}

func (f *fakeBackend) bump(call string) {
	f.rv++
	f.calls = append(f.calls, call)
}

func (f *fakeBackend) Reset(_ context.Context, t string, c Caller) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch t {
	case "On", "ForceRestart", "GracefulRestart", "PowerCycle":
		f.sys.PowerState = "On"
	default:
		f.sys.PowerState = "Off"
	}
	f.bump("reset " + t + " as " + c.User)
	return nil
}

func (f *fakeBackend) SetBoot(_ context.Context, target, enabled, ifMatch string, _ Caller) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ifMatch != "" && ifMatch != fmt.Sprintf(`W/"%d"`, f.rv) {
		return ErrPreconditionFailed
	}
	f.sys.BootTarget, f.sys.BootEnabled = target, enabled
	f.bump("boot " + target + " " + enabled)
	return nil
}

func (f *fakeBackend) InsertMedia(_ context.Context, image string, _ Caller) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if strings.Contains(image, "BAD") {
		return &InvalidValueError{Property: "Image", Value: image, Why: "bad"}
	}
	f.sys.MediaImage = image
	f.bump("insert " + image)
	return nil
}

func (f *fakeBackend) EjectMedia(context.Context, Caller) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sys.MediaImage = ""
	f.bump("eject")
	return nil
}

func start(t *testing.T) (*httptest.Server, *fakeBackend) {
	t.Helper()
	b := &fakeBackend{user: "admin", pass: "s3cret", sys: System{ID: "m1", PowerState: "On", BootTarget: "Hdd", BootEnabled: "Continuous"}}
	srv := httptest.NewTLSServer(&Service{Backend: b})
	t.Cleanup(srv.Close)
	return srv, b
}

// response is what a test reads of an HTTP response (its body already
// read and closed).
type response struct {
	StatusCode int
	Header     http.Header
}

func do(t *testing.T, srv *httptest.Server, method, path, body string, hdr map[string]string) (response, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if hdr["X-Auth-Token"] == "" && hdr["noauth"] == "" {
		req.SetBasicAuth("admin", "s3cret")
	}
	rsp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer rsp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(rsp.Body).Decode(&out)
	return response{StatusCode: rsp.StatusCode, Header: rsp.Header}, out
}

func TestGoClient(t *testing.T) {
	srv, b := start(t)
	// The service root needs no authentication; the rest does.
	if rsp, root := do(t, srv, "GET", "/redfish/v1/", "", map[string]string{"noauth": "1"}); rsp.StatusCode != http.StatusOK || root["Systems"] == nil {
		t.Fatalf("service root: %d %v", rsp.StatusCode, root)
	}
	rsp, body := do(t, srv, "GET", "/redfish/v1/Systems/m1", "", map[string]string{"noauth": "1"})
	if rsp.StatusCode != http.StatusUnauthorized || body["error"] == nil {
		t.Fatalf("unauthenticated GET: %d %v", rsp.StatusCode, body)
	}
	// Sessions: login, use the token, logout.
	rsp, body = do(t, srv, "POST", "/redfish/v1/SessionService/Sessions", `{"UserName":"admin","Password":"s3cret"}`, map[string]string{"noauth": "1"})
	token, loc := rsp.Header.Get("X-Auth-Token"), rsp.Header.Get("Location")
	if rsp.StatusCode != http.StatusCreated || token == "" || loc == "" {
		t.Fatalf("login: %d %v", rsp.StatusCode, body)
	}
	rsp, sys := do(t, srv, "GET", "/redfish/v1/Systems/m1", "", map[string]string{"X-Auth-Token": token})
	if rsp.StatusCode != http.StatusOK || sys["PowerState"] != "On" {
		t.Fatalf("system with a token: %d %v", rsp.StatusCode, sys)
	}
	etag := rsp.Header.Get("ETag")
	allow := sys["Actions"].(map[string]any)["#ComputerSystem.Reset"].(map[string]any)["ResetType@Redfish.AllowableValues"]
	if fmt.Sprint(allow) != "[On ForceOff GracefulShutdown ForceRestart GracefulRestart PowerCycle]" {
		t.Fatalf("reset allowable values: %v", allow)
	}
	// PATCH with the current ETag, then with the now stale one: 412.
	patch := `{"Boot":{"BootSourceOverrideTarget":"Pxe","BootSourceOverrideEnabled":"Once"}}`
	if rsp, body := do(t, srv, "PATCH", "/redfish/v1/Systems/m1", patch, map[string]string{"If-Match": etag}); rsp.StatusCode != http.StatusOK {
		t.Fatalf("PATCH with a fresh ETag: %d %v", rsp.StatusCode, body)
	}
	rsp, body = do(t, srv, "PATCH", "/redfish/v1/Systems/m1", patch, map[string]string{"If-Match": etag})
	if rsp.StatusCode != http.StatusPreconditionFailed || !strings.Contains(fmt.Sprint(body["error"]), "Base.1.8.PreconditionFailed") {
		t.Fatalf("PATCH with a stale ETag: %d %v", rsp.StatusCode, body)
	}
	if rsp, body := do(t, srv, "PATCH", "/redfish/v1/Systems/m1", `{"Boot":{"BootSourceOverrideTarget":"Floppy"}}`, nil); rsp.StatusCode != http.StatusBadRequest ||
		!strings.Contains(fmt.Sprint(body), "PropertyValueNotInList") {
		t.Fatalf("PATCH Floppy: %d %v", rsp.StatusCode, body)
	}
	if rsp, body := do(t, srv, "POST", "/redfish/v1/Systems/m1/Actions/ComputerSystem.Reset", `{"ResetType":"Nmi"}`, nil); rsp.StatusCode != http.StatusBadRequest {
		t.Fatalf("reset Nmi: %d %v", rsp.StatusCode, body)
	}
	if rsp, _ := do(t, srv, "POST", "/redfish/v1/Systems/m1/Actions/ComputerSystem.Reset", `{"ResetType":"ForceOff"}`, nil); rsp.StatusCode != http.StatusNoContent {
		t.Fatalf("reset ForceOff: %d", rsp.StatusCode)
	}
	// Virtual media.
	cd := "/redfish/v1/Managers/BMC/VirtualMedia/Cd"
	if rsp, body := do(t, srv, "POST", cd+"/Actions/VirtualMedia.InsertMedia", `{"Image":"http://x/BAD.iso"}`, nil); rsp.StatusCode != http.StatusBadRequest {
		t.Fatalf("insert a bad image: %d %v", rsp.StatusCode, body)
	}
	if rsp, _ := do(t, srv, "POST", cd+"/Actions/VirtualMedia.InsertMedia", `{"Image":"http://x/busybox.iso","Inserted":true}`, nil); rsp.StatusCode != http.StatusNoContent {
		t.Fatalf("insert: %d", rsp.StatusCode)
	}
	if _, m := do(t, srv, "GET", cd, "", nil); m["Inserted"] != true || m["Image"] != "http://x/busybox.iso" {
		t.Fatalf("media after insert: %v", m)
	}
	if rsp, _ := do(t, srv, "POST", cd+"/Actions/VirtualMedia.EjectMedia", `{}`, nil); rsp.StatusCode != http.StatusNoContent {
		t.Fatalf("eject: %d", rsp.StatusCode)
	}
	// Logout; the token stops working. Password rotation ends sessions.
	if rsp, _ := do(t, srv, "DELETE", loc, "", map[string]string{"X-Auth-Token": token}); rsp.StatusCode != http.StatusNoContent {
		t.Fatalf("logout: %d", rsp.StatusCode)
	}
	if rsp, _ := do(t, srv, "GET", "/redfish/v1/Systems", "", map[string]string{"X-Auth-Token": token}); rsp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a closed session's token: %d", rsp.StatusCode)
	}
	rsp, _ = do(t, srv, "POST", "/redfish/v1/SessionService/Sessions", `{"UserName":"admin","Password":"s3cret"}`, map[string]string{"noauth": "1"})
	token = rsp.Header.Get("X-Auth-Token")
	b.mu.Lock()
	b.pass = "n3w"
	b.mu.Unlock()
	if rsp, _ := do(t, srv, "GET", "/redfish/v1/Systems", "", map[string]string{"X-Auth-Token": token}); rsp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a session of the old password: %d", rsp.StatusCode)
	}
	if rsp, _ := do(t, srv, "GET", "/redfish/v1/Systems", "", nil); rsp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("basic auth with the old password: %d", rsp.StatusCode)
	}
}

// Redfishtool runs redfishtool against addr (host:port).
func Redfishtool(ctx context.Context, addr, user, pass string, args ...string) (string, error) {
	a := append([]string{"-r", addr, "-u", user, "-p", pass, "-S", "Always", "-T", "5"}, args...)
	out, err := exec.CommandContext(ctx, "redfishtool", a...).CombinedOutput()
	return string(out), err
}

func TestRedfishtool(t *testing.T) {
	testpeer.NeedTool(t, "redfishtool", "redfishtool")
	srv, b := start(t)
	addr := strings.TrimPrefix(srv.URL, "https://")
	run := func(args ...string) string {
		t.Helper()
		out, err := Redfishtool(t.Context(), addr, "admin", "s3cret", args...)
		if err != nil {
			t.Fatalf("redfishtool %v: %v\n%s", args, err, out)
		}
		return out
	}
	if out := run("Systems"); !strings.Contains(out, "/redfish/v1/Systems/m1") {
		t.Fatalf("Systems: %s", out)
	}
	run("Systems", "reset", "GracefulShutdown")
	run("Systems", "setBootOverride", "Once", "Pxe")
	run("-A", "Session", "Systems", "reset", "On")
	b.mu.Lock()
	calls := strings.Join(b.calls, "; ")
	b.mu.Unlock()
	if calls != "reset GracefulShutdown as admin; boot Pxe Once; reset On as admin" {
		t.Fatalf("calls: %s", calls)
	}
	if out, err := Redfishtool(t.Context(), addr, "admin", "wrong", "Systems"); err == nil {
		t.Fatalf("a wrong password was accepted: %s", out)
	}
}
