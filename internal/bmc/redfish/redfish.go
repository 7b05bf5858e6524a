// Package redfish is a DMTF Redfish service for one machine: the service
// root, the SessionService (X-Auth-Token sessions and HTTP basic
// authentication), one ComputerSystem (power state, boot source override,
// the Reset action) and one Manager with a virtual CD (InsertMedia,
// EjectMedia). PATCH honours If-Match against the system's ETag; errors
// carry DMTF-style bodies (Base message registry).
package redfish

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Caller is who sent an accepted request.
type Caller struct {
	// Addr is the remote IP address.
	Addr string
	// User is the authenticated user name.
	User string
}

// System is the machine as the backend observes it.
type System struct {
	// ID is the system's identifier in URLs (the Machine's name).
	ID string
	// PowerState is On, Off, PoweringOn or PoweringOff.
	PowerState string
	// BootTarget is None, Pxe, Hdd or Cd; BootEnabled Disabled, Once or
	// Continuous.
	BootTarget, BootEnabled string
	// MediaImage is the inserted virtual media image ("" when none).
	MediaImage string
	// ETag identifies this state (the Machine's resourceVersion).
	ETag string
}

// ErrPreconditionFailed is returned by a backend write whose If-Match no
// longer holds.
var ErrPreconditionFailed = errors.New("redfish: the resource changed since its ETag was read")

// InvalidValueError is a property value the backend refuses.
type InvalidValueError struct{ Property, Value, Why string }

func (e *InvalidValueError) Error() string {
	return fmt.Sprintf("the value %q of %s is not accepted: %s", e.Value, e.Property, e.Why)
}

// Backend is the machine behind the service.
type Backend interface {
	// Credentials are the user's name and password; ok false refuses all.
	Credentials() (user, password string, ok bool)
	System(ctx context.Context) (System, error)
	// Reset carries out a ComputerSystem.Reset of one of ResetTypes.
	Reset(ctx context.Context, resetType string, c Caller) error
	// SetBoot sets the boot source override; ifMatch, when not empty, is
	// the ETag the change is conditional on.
	SetBoot(ctx context.Context, target, enabled, ifMatch string, c Caller) error
	// InsertMedia sets the virtual CD's image; EjectMedia removes it.
	InsertMedia(ctx context.Context, image string, c Caller) error
	EjectMedia(ctx context.Context, c Caller) error
}

// Allowable values.
var (
	ResetTypes   = []string{"On", "ForceOff", "GracefulShutdown", "ForceRestart", "GracefulRestart", "PowerCycle"}
	BootTargets  = []string{"None", "Pxe", "Hdd", "Cd"}
	BootEnableds = []string{"Disabled", "Once", "Continuous"}
)

// Defaults of [Service].
const (
	DefaultSessionTimeout = 30 * time.Minute
	DefaultMaxSessions    = 64
)

// Service is the Redfish HTTP handler of one BMC.
type Service struct {
	Backend Backend
	// SessionTimeout expires idle sessions; MaxSessions bounds them.
	SessionTimeout time.Duration
	MaxSessions    int

	mu       sync.Mutex
	sessions map[string]*session // by token
}

type session struct {
	id, user, creds string
	seen            time.Time
}

func credFingerprint(user, pass string) string {
	s := sha256.Sum256([]byte(user + "\x00" + pass))
	return hex.EncodeToString(s[:])
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

const odataVersion = "4.0"

// ServeHTTP routes a request.
func (s *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("OData-Version", odataVersion)
	p := strings.TrimSuffix(r.URL.Path, "/")
	switch p {
	case "/redfish":
		if !method(w, r, http.MethodGet) {
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"v1": "/redfish/v1/"})
		return
	case "/redfish/v1":
		if !method(w, r, http.MethodGet) {
			return
		}
		s.serviceRoot(w)
		return
	case "/redfish/v1/SessionService/Sessions":
		if r.Method == http.MethodPost {
			s.login(w, r)
			return
		}
	}
	if !strings.HasPrefix(p, "/redfish/v1/") {
		writeError(w, http.StatusNotFound, "ResourceMissingAtURI", fmt.Sprintf("The resource at the URI %s was not found.", r.URL.Path))
		return
	}
	user, token, ok := s.authenticate(r)
	if !ok {
		w.Header().Set("WWW-Authenticate", `Basic realm="Converge BMC"`)
		writeError(w, http.StatusUnauthorized, "NoValidSession", "There is no valid session established with the implementation.")
		return
	}
	c := Caller{Addr: remoteIP(r), User: user}
	sys, err := s.Backend.System(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "ServiceTemporarilyUnavailable", "The machine cannot be read: "+err.Error())
		return
	}
	sysPath := "/redfish/v1/Systems/" + sys.ID
	switch p {
	case "/redfish/v1/SessionService":
		if method(w, r, http.MethodGet) {
			writeJSON(w, http.StatusOK, map[string]any{
				"@odata.id": "/redfish/v1/SessionService", "@odata.type": "#SessionService.v1_1_8.SessionService",
				"Id": "SessionService", "Name": "Session Service", "ServiceEnabled": true,
				"SessionTimeout": int(s.timeout().Seconds()),
				"Sessions":       odataID("/redfish/v1/SessionService/Sessions"),
			})
		}
	case "/redfish/v1/SessionService/Sessions":
		if method(w, r, http.MethodGet) {
			s.listSessions(w)
		}
	case "/redfish/v1/Systems":
		if method(w, r, http.MethodGet) {
			writeJSON(w, http.StatusOK, collection("/redfish/v1/Systems", "#ComputerSystemCollection.ComputerSystemCollection", "Computer System Collection", sysPath))
		}
	case sysPath:
		switch r.Method {
		case http.MethodGet:
			w.Header().Set("ETag", sys.ETag)
			writeJSON(w, http.StatusOK, systemBody(sys))
		case http.MethodPatch:
			s.patchSystem(w, r, sys, c)
		default:
			methodNotAllowed(w, r, "GET, PATCH")
		}
	case sysPath + "/Actions/ComputerSystem.Reset":
		if method(w, r, http.MethodPost) {
			s.reset(w, r, c)
		}
	case "/redfish/v1/Managers":
		if method(w, r, http.MethodGet) {
			writeJSON(w, http.StatusOK, collection("/redfish/v1/Managers", "#ManagerCollection.ManagerCollection", "Manager Collection", "/redfish/v1/Managers/BMC"))
		}
	case "/redfish/v1/Managers/BMC":
		if method(w, r, http.MethodGet) {
			writeJSON(w, http.StatusOK, map[string]any{
				"@odata.id": "/redfish/v1/Managers/BMC", "@odata.type": "#Manager.v1_10_0.Manager",
				"Id": "BMC", "Name": "Converge virtual BMC", "ManagerType": "BMC",
				"Status":       map[string]any{"State": "Enabled", "Health": "OK"},
				"VirtualMedia": odataID("/redfish/v1/Managers/BMC/VirtualMedia"),
				"Links":        map[string]any{"ManagerForServers": []any{odataID(sysPath)}},
			})
		}
	case "/redfish/v1/Managers/BMC/VirtualMedia":
		if method(w, r, http.MethodGet) {
			writeJSON(w, http.StatusOK, collection("/redfish/v1/Managers/BMC/VirtualMedia", "#VirtualMediaCollection.VirtualMediaCollection", "Virtual Media Collection", "/redfish/v1/Managers/BMC/VirtualMedia/Cd"))
		}
	case "/redfish/v1/Managers/BMC/VirtualMedia/Cd":
		if method(w, r, http.MethodGet) {
			writeJSON(w, http.StatusOK, mediaBody(sys))
		}
	case "/redfish/v1/Managers/BMC/VirtualMedia/Cd/Actions/VirtualMedia.InsertMedia":
		if method(w, r, http.MethodPost) {
			s.insert(w, r, c)
		}
	case "/redfish/v1/Managers/BMC/VirtualMedia/Cd/Actions/VirtualMedia.EjectMedia":
		if method(w, r, http.MethodPost) {
			if err := s.Backend.EjectMedia(r.Context(), c); err != nil {
				writeBackendError(w, err)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		}
	default:
		if strings.HasPrefix(p, "/redfish/v1/SessionService/Sessions/") {
			s.sessionResource(w, r, strings.TrimPrefix(p, "/redfish/v1/SessionService/Sessions/"), token)
			return
		}
		writeError(w, http.StatusNotFound, "ResourceMissingAtURI", fmt.Sprintf("The resource at the URI %s was not found.", r.URL.Path))
	}
}

func (s *Service) timeout() time.Duration {
	if s.SessionTimeout > 0 {
		return s.SessionTimeout
	}
	return DefaultSessionTimeout
}

func (s *Service) serviceRoot(w http.ResponseWriter) {
	writeJSON(w, http.StatusOK, map[string]any{
		"@odata.id": "/redfish/v1/", "@odata.type": "#ServiceRoot.v1_11_0.ServiceRoot",
		"Id": "RootService", "Name": "Converge Redfish Service", "RedfishVersion": "1.11.0",
		"UUID":           "00000000-0000-0000-0000-000000000000",
		"Systems":        odataID("/redfish/v1/Systems"),
		"Managers":       odataID("/redfish/v1/Managers"),
		"SessionService": odataID("/redfish/v1/SessionService"),
		"Links":          map[string]any{"Sessions": odataID("/redfish/v1/SessionService/Sessions")},
	})
}

// authenticate accepts an X-Auth-Token of a live session made with the
// current credentials, or basic authentication with them.
func (s *Service) authenticate(r *http.Request) (user, token string, ok bool) {
	u, p, has := s.Backend.Credentials()
	if !has {
		return "", "", false
	}
	fp := credFingerprint(u, p)
	if t := r.Header.Get("X-Auth-Token"); t != "" {
		s.mu.Lock()
		defer s.mu.Unlock()
		ss := s.sessions[t]
		if ss == nil || ss.creds != fp || time.Since(ss.seen) > s.timeout() {
			delete(s.sessions, t)
			return "", "", false
		}
		ss.seen = time.Now()
		return ss.user, t, true
	}
	bu, bp, basic := r.BasicAuth()
	if basic && subtle.ConstantTimeCompare([]byte(credFingerprint(bu, bp)), []byte(fp)) == 1 {
		return bu, "", true
	}
	return "", "", false
}

func (s *Service) login(w http.ResponseWriter, r *http.Request) {
	var body struct {
		UserName, Password string
	}
	if !readJSON(w, r, &body) {
		return
	}
	u, p, has := s.Backend.Credentials()
	if !has || subtle.ConstantTimeCompare([]byte(credFingerprint(body.UserName, body.Password)), []byte(credFingerprint(u, p))) != 1 {
		writeError(w, http.StatusUnauthorized, "NoValidSession", "The user name or password is not valid.")
		return
	}
	s.mu.Lock()
	if s.sessions == nil {
		s.sessions = map[string]*session{}
	}
	for t, ss := range s.sessions {
		if time.Since(ss.seen) > s.timeout() {
			delete(s.sessions, t)
		}
	}
	maxN := s.MaxSessions
	if maxN <= 0 {
		maxN = DefaultMaxSessions
	}
	if len(s.sessions) >= maxN {
		s.mu.Unlock()
		writeError(w, http.StatusServiceUnavailable, "SessionLimitExceeded", "The session establishment failed due to the number of simultaneous sessions exceeding the limit of the implementation.")
		return
	}
	token := randomHex(16)
	ss := &session{id: randomHex(8), user: u, creds: credFingerprint(u, p), seen: time.Now()}
	s.sessions[token] = ss
	s.mu.Unlock()
	loc := "/redfish/v1/SessionService/Sessions/" + ss.id
	w.Header().Set("X-Auth-Token", token)
	w.Header().Set("Location", loc)
	writeJSON(w, http.StatusCreated, sessionBody(ss))
}

func sessionBody(ss *session) map[string]any {
	return map[string]any{
		"@odata.id": "/redfish/v1/SessionService/Sessions/" + ss.id, "@odata.type": "#Session.v1_3_0.Session",
		"Id": ss.id, "Name": "User Session", "UserName": ss.user,
	}
}

func (s *Service) listSessions(w http.ResponseWriter) {
	s.mu.Lock()
	var ids []string
	for _, ss := range s.sessions {
		ids = append(ids, "/redfish/v1/SessionService/Sessions/"+ss.id)
	}
	s.mu.Unlock()
	slices.Sort(ids)
	writeJSON(w, http.StatusOK, collection("/redfish/v1/SessionService/Sessions", "#SessionCollection.SessionCollection", "Session Collection", ids...))
}

func (s *Service) sessionResource(w http.ResponseWriter, r *http.Request, id, _ string) {
	s.mu.Lock()
	var token string
	var found *session
	for t, ss := range s.sessions {
		if ss.id == id {
			token, found = t, ss
		}
	}
	if found == nil {
		s.mu.Unlock()
		writeError(w, http.StatusNotFound, "ResourceMissingAtURI", fmt.Sprintf("The resource at the URI %s was not found.", r.URL.Path))
		return
	}
	switch r.Method {
	case http.MethodGet:
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, sessionBody(found))
	case http.MethodDelete:
		delete(s.sessions, token)
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	default:
		s.mu.Unlock()
		methodNotAllowed(w, r, "GET, DELETE")
	}
}

func systemBody(sys System) map[string]any {
	p := "/redfish/v1/Systems/" + sys.ID
	return map[string]any{
		"@odata.id": p, "@odata.type": "#ComputerSystem.v1_13_0.ComputerSystem", "@odata.etag": sys.ETag,
		"Id": sys.ID, "Name": sys.ID, "SystemType": "Virtual",
		"Manufacturer": "Converge", "Model": "Machine",
		"PowerState": sys.PowerState,
		"Status":     map[string]any{"State": "Enabled", "Health": "OK"},
		"Boot": map[string]any{
			"BootSourceOverrideTarget":                          sys.BootTarget,
			"BootSourceOverrideEnabled":                         sys.BootEnabled,
			"BootSourceOverrideMode":                            "UEFI",
			"BootSourceOverrideTarget@Redfish.AllowableValues":  BootTargets,
			"BootSourceOverrideEnabled@Redfish.AllowableValues": BootEnableds,
		},
		"Actions": map[string]any{
			"#ComputerSystem.Reset": map[string]any{
				"target":                            p + "/Actions/ComputerSystem.Reset",
				"ResetType@Redfish.AllowableValues": ResetTypes,
			},
		},
		"Links": map[string]any{"ManagedBy": []any{odataID("/redfish/v1/Managers/BMC")}},
	}
}

func mediaBody(sys System) map[string]any {
	p := "/redfish/v1/Managers/BMC/VirtualMedia/Cd"
	var image any
	if sys.MediaImage != "" {
		image = sys.MediaImage
	}
	return map[string]any{
		"@odata.id": p, "@odata.type": "#VirtualMedia.v1_3_0.VirtualMedia",
		"Id": "Cd", "Name": "Virtual CD", "MediaTypes": []string{"CD", "DVD"},
		"Image": image, "Inserted": sys.MediaImage != "", "WriteProtected": true,
		"ConnectedVia": "URI",
		"Actions": map[string]any{
			"#VirtualMedia.InsertMedia": map[string]any{"target": p + "/Actions/VirtualMedia.InsertMedia"},
			"#VirtualMedia.EjectMedia":  map[string]any{"target": p + "/Actions/VirtualMedia.EjectMedia"},
		},
	}
}

func (s *Service) patchSystem(w http.ResponseWriter, r *http.Request, sys System, c Caller) {
	ifMatch := r.Header.Get("If-Match")
	if ifMatch != "" && ifMatch != "*" && ifMatch != sys.ETag {
		writeError(w, http.StatusPreconditionFailed, "PreconditionFailed", "The ETag supplied did not match the ETag required to change this resource.")
		return
	}
	if ifMatch == "*" {
		ifMatch = ""
	}
	var body struct {
		Boot *struct {
			BootSourceOverrideTarget  *string
			BootSourceOverrideEnabled *string
			BootSourceOverrideMode    *string
		}
	}
	if !readJSON(w, r, &body) {
		return
	}
	if body.Boot == nil {
		writeError(w, http.StatusBadRequest, "PropertyUnknown", "Only Boot can be changed on this system.")
		return
	}
	target, enabled := sys.BootTarget, sys.BootEnabled
	if v := body.Boot.BootSourceOverrideTarget; v != nil {
		if !slices.Contains(BootTargets, *v) {
			writePropertyError(w, "PropertyValueNotInList", *v, "Boot/BootSourceOverrideTarget")
			return
		}
		target = *v
	}
	if v := body.Boot.BootSourceOverrideEnabled; v != nil {
		if !slices.Contains(BootEnableds, *v) {
			writePropertyError(w, "PropertyValueNotInList", *v, "Boot/BootSourceOverrideEnabled")
			return
		}
		enabled = *v
	}
	if v := body.Boot.BootSourceOverrideMode; v != nil && *v != "UEFI" && *v != "Legacy" {
		writePropertyError(w, "PropertyValueNotInList", *v, "Boot/BootSourceOverrideMode")
		return
	}
	if err := s.Backend.SetBoot(r.Context(), target, enabled, ifMatch, c); err != nil {
		writeBackendError(w, err)
		return
	}
	sys, err := s.Backend.System(r.Context())
	if err != nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.Header().Set("ETag", sys.ETag)
	writeJSON(w, http.StatusOK, systemBody(sys))
}

func (s *Service) reset(w http.ResponseWriter, r *http.Request, c Caller) {
	var body struct{ ResetType string }
	if !readJSON(w, r, &body) {
		return
	}
	if body.ResetType == "" {
		writeError(w, http.StatusBadRequest, "ActionParameterMissing", "The action ComputerSystem.Reset requires the parameter ResetType to be present in the request body.")
		return
	}
	if !slices.Contains(ResetTypes, body.ResetType) {
		writeError(w, http.StatusBadRequest, "ActionParameterNotSupported",
			fmt.Sprintf("The parameter ResetType value %s is not supported (allowed: %s).", body.ResetType, strings.Join(ResetTypes, ", ")))
		return
	}
	if err := s.Backend.Reset(r.Context(), body.ResetType, c); err != nil {
		writeBackendError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Service) insert(w http.ResponseWriter, r *http.Request, c Caller) {
	var body struct {
		Image    string
		Inserted *bool
	}
	if !readJSON(w, r, &body) {
		return
	}
	if body.Image == "" {
		writeError(w, http.StatusBadRequest, "ActionParameterMissing", "The action VirtualMedia.InsertMedia requires the parameter Image to be present in the request body.")
		return
	}
	if body.Inserted != nil && !*body.Inserted {
		writePropertyError(w, "ActionParameterValueError", "false", "Inserted")
		return
	}
	if err := s.Backend.InsertMedia(r.Context(), body.Image, c); err != nil {
		writeBackendError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func collection(id, typ, name string, members ...string) map[string]any {
	m := make([]any, 0, len(members))
	for _, x := range members {
		m = append(m, odataID(x))
	}
	return map[string]any{"@odata.id": id, "@odata.type": typ, "Name": name, "Members": m, "Members@odata.count": len(m)}
}

func odataID(p string) map[string]any { return map[string]any{"@odata.id": p} }

func method(w http.ResponseWriter, r *http.Request, m string) bool {
	if r.Method == m {
		return true
	}
	methodNotAllowed(w, r, m)
	return false
}

func methodNotAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	w.Header().Set("Allow", allow)
	writeError(w, http.StatusMethodNotAllowed, "OperationNotAllowed", fmt.Sprintf("The HTTP method %s is not allowed on %s.", r.Method, r.URL.Path))
}

func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	b, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err == nil {
		err = json.Unmarshal(b, v)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "MalformedJSON", "The request body submitted was malformed JSON and could not be parsed by the receiving service.")
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError writes a DMTF error body with one Base registry message.
func writeError(w http.ResponseWriter, code int, messageID, message string) {
	writeJSON(w, code, map[string]any{"error": map[string]any{
		"code":    "Base.1.8." + messageID,
		"message": message,
		"@Message.ExtendedInfo": []any{map[string]any{
			"@odata.type": "#Message.v1_1_1.Message",
			"MessageId":   "Base.1.8." + messageID,
			"Message":     message,
			"Severity":    "Critical",
			"Resolution":  "See the message.",
		}},
	}})
}

func writePropertyError(w http.ResponseWriter, messageID, value, property string) {
	writeError(w, http.StatusBadRequest, messageID, fmt.Sprintf("The value %s for the property %s is not in the list of acceptable values.", value, property))
}

func writeBackendError(w http.ResponseWriter, err error) {
	var iv *InvalidValueError
	switch {
	case errors.Is(err, ErrPreconditionFailed):
		writeError(w, http.StatusPreconditionFailed, "PreconditionFailed", "The ETag supplied did not match the ETag required to change this resource.")
	case errors.As(err, &iv):
		writeError(w, http.StatusBadRequest, "PropertyValueFormatError", iv.Error())
	default:
		writeError(w, http.StatusInternalServerError, "InternalError", "The request failed due to an internal service error: "+err.Error())
	}
}

func remoteIP(r *http.Request) string {
	h, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return h
}
