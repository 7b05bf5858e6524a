// Package pebbletest runs Let's Encrypt's test ACME server, Pebble (the
// Debian pebble package), with pebble-challtestsrv as its DNS server, on
// loopback only, with a TLS certificate made for the run. Every name resolves
// to 127.0.0.1 unless a test points it elsewhere (SetA), so Pebble validates
// HTTP-01 challenges against the manager's own listener.
package pebbletest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/converge-dev/converge/internal/localcp"
)

// Pebble is a running Pebble and challenge test server.
type Pebble struct {
	// Directory is the ACME directory URL.
	Directory string
	// CABundle is the PEM CA of Pebble's TLS listener (for spec.acme.caBundle).
	CABundle []byte

	mgmt, challMgmt string
	dir             string
	procs           []*exec.Cmd
}

// Available says whether the pebble binaries are installed.
func Available() error {
	for _, b := range []string{"pebble", "pebble-challtestsrv"} {
		if _, err := exec.LookPath(b); err != nil {
			return fmt.Errorf("%s not found (apt-get install pebble): %w", b, err)
		}
	}
	return nil
}

// Start runs Pebble validating HTTP-01 on httpPort of 127.0.0.1.
func Start(ctx context.Context, httpPort int) (*Pebble, error) {
	return StartOn(ctx, httpPort, 0)
}

// DirectoryURL is the directory of a Pebble started on dirPort (StartOn):
// what a manager started before it allows (--acme-allowed-directories).
func DirectoryURL(dirPort int) string {
	return "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(dirPort)) + "/dir"
}

// StartOn is Start with the directory on dirPort of 127.0.0.1 (a free port
// when 0).
func StartOn(ctx context.Context, httpPort, dirPort int) (*Pebble, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "converge-pebble-")
	if err != nil {
		return nil, err
	}
	p := &Pebble{dir: dir}
	ports := make([]int, 5)
	for i := range ports {
		if ports[i], err = localcp.FreePort(); err != nil {
			return nil, err
		}
	}
	dns, chall, listen, mgmt, tlsPort := ports[0], ports[1], ports[2], ports[3], ports[4]
	if dirPort != 0 {
		listen = dirPort
	}
	ca, err := p.writeTLS()
	if err != nil {
		p.Stop()
		return nil, err
	}
	p.CABundle = ca
	lo := func(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
	p.challMgmt = "http://" + lo(chall)
	p.mgmt = "https://" + lo(mgmt)
	p.Directory = DirectoryURL(listen)
	if err := p.run(ctx, "pebble-challtestsrv", nil, "-dns01", lo(dns), "-http01", "", "-https01", "", "-tlsalpn01", "",
		"-management", lo(chall), "-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""); err != nil {
		p.Stop()
		return nil, err
	}
	cfg := map[string]any{"pebble": map[string]any{
		"listenAddress": lo(listen), "managementListenAddress": lo(mgmt),
		"certificate": filepath.Join(dir, "cert.pem"), "privateKey": filepath.Join(dir, "key.pem"),
		"httpPort": httpPort, "tlsPort": tlsPort, "ocspResponderURL": "", "externalAccountBindingRequired": false,
	}}
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "pebble.json"), b, 0o600); err != nil {
		p.Stop()
		return nil, err
	}
	env := []string{"PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0", "PEBBLE_AUTHZREUSE=0", "PEBBLE_VA_ALWAYS_VALID=0"}
	if err := p.run(ctx, "pebble", env, "-config", filepath.Join(dir, "pebble.json"), "-dnsserver", lo(dns)); err != nil {
		p.Stop()
		return nil, err
	}
	if err := p.wait(ctx); err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}

func (p *Pebble) run(ctx context.Context, name string, env []string, args ...string) error {
	cmd := exec.CommandContext(context.WithoutCancel(ctx), name, args...)
	cmd.Env = append(os.Environ(), env...)
	log, err := os.Create(filepath.Join(p.dir, name+".log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	p.procs = append(p.procs, cmd)
	return nil
}

func (p *Pebble) client() *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.CABundle)
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
}

func (p *Pebble) wait(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.Directory, nil)
		if resp, err := p.client().Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				if c, err := net.DialTimeout("tcp", p.challMgmt[len("http://"):], time.Second); err == nil {
					_ = c.Close()
					return nil
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	logs, _ := os.ReadFile(filepath.Join(p.dir, "pebble-challtestsrv.log"))
	if len(logs) > 2000 {
		logs = logs[len(logs)-2000:]
	}
	return fmt.Errorf("pebble did not start within 30s; challtestsrv said: %s", logs)
}

// Roots returns Pebble's issuing root CA (PEM), which signs the
// intermediates of the certificates it issues.
func (p *Pebble) Roots(ctx context.Context) ([]byte, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.mgmt+"/roots/0", nil)
	resp, err := p.client().Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("pebble roots: status %d: %w", resp.StatusCode, err)
	}
	return b, nil
}

// SetA makes the DNS server answer host with addr (for example an address
// where nothing listens, to make the challenge unreachable).
func (p *Pebble) SetA(ctx context.Context, host, addr string) error {
	body, _ := json.Marshal(map[string]any{"host": host, "addresses": []string{addr}})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.challMgmt+"/add-a", bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("challtestsrv add-a: %s", resp.Status)
	}
	return nil
}

// Orders counts the orders Pebble has accepted since it started (from its
// log: "Added order"), whoever placed them: what a test counts to show that
// a refused request never reached the CA.
func (p *Pebble) Orders() (int, error) {
	b, err := os.ReadFile(filepath.Join(p.dir, "pebble.log"))
	if err != nil {
		return 0, fmt.Errorf("reading pebble's log: %w", err)
	}
	return bytes.Count(b, []byte("Added order ")), nil
}

// Stop kills both servers and removes their files.
func (p *Pebble) Stop() {
	for _, c := range p.procs {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	_ = os.RemoveAll(p.dir)
}

// writeTLS makes a CA and a certificate for 127.0.0.1/localhost for Pebble's
// listeners, and returns the CA PEM.
func (p *Pebble) writeTLS() ([]byte, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "converge pebbletest CA"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "pebble"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caTmpl, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(p.dir, "cert.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(p.dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), nil
}
