// Package bmctest holds what the tests of Converge's BMC clients share: an
// impostor, an HTTPS server on loopback that answers as a Redfish service
// and records every request that reaches it, so that a test can prove a
// client that must not trust it sent it nothing (no credentials, no
// command).
package bmctest

import (
	"bytes"
	"crypto/tls"
	"log"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// Impostor is an HTTPS server on 127.0.0.1 answering every request with a
// Redfish ComputerSystem collection of one member. It records each request
// and what the server logs (a "TLS handshake error" is a client that hung
// up during the handshake).
type Impostor struct {
	*httptest.Server

	mu       sync.Mutex
	requests []string
	errLog   bytes.Buffer
}

// StartImpostor starts an Impostor presenting cert, or httptest's own
// self-signed certificate for 127.0.0.1 when cert is nil. It is closed when
// the test ends.
func StartImpostor(t testing.TB, cert *tls.Certificate) *Impostor {
	t.Helper()
	imp := &Impostor{}
	imp.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		imp.mu.Lock()
		imp.requests = append(imp.requests, r.Method+" "+r.URL.Path+" auth="+r.Header.Get("Authorization"))
		imp.mu.Unlock()
		_, _ = w.Write([]byte(`{"Members":[{"@odata.id":"/redfish/v1/Systems/1"}]}`))
	}))
	if cert != nil {
		imp.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12}
	}
	imp.Config.ErrorLog = log.New(writerFunc(imp.logf), "", 0)
	imp.StartTLS()
	t.Cleanup(imp.Close)
	return imp
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func (i *Impostor) logf(p []byte) (int, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.errLog.Write(p)
}

// Requests returns the requests that reached the impostor, in order, each
// as "METHOD path auth=<Authorization header>".
func (i *Impostor) Requests() []string {
	i.mu.Lock()
	defer i.mu.Unlock()
	return append([]string(nil), i.requests...)
}

// ErrorLog returns what the server logged.
func (i *Impostor) ErrorLog() string {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.errLog.String()
}
