package machineupgrade

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/converge-dev/converge/internal/bmc"
)

// newRedfishHTTPClient is the default HTTPClient: each TLS connection to a
// BMC is verified against the CA kept in BMCCASecret (the manager's
// namespace, which tenants cannot write) and against the host of the
// endpoint dialled. A BMC whose certificate does not verify gets no
// request, so neither the credentials nor a command reach whoever answers
// in its place.
func (r *Reconciler) newRedfishHTTPClient() *http.Client {
	return &http.Client{
		Timeout: DefaultPowerCycleTimeout,
		Transport: &http.Transport{
			DialTLSContext:      r.dialBMC,
			MaxIdleConnsPerHost: 2,
		},
	}
}

// caTrust is the pool of the BMC CA, kept in memory (bmc.CATrust): read
// from the manager's cache, made again when the cached Secret changes, and
// read from the API server only after a certificate did not verify.
func (r *Reconciler) caTrust() *bmc.CATrust {
	r.bmcTrustOnce.Do(func() { r.bmcTrust = &bmc.CATrust{Key: r.BMCCASecret, Cache: r.Client, Live: r.APIReader} })
	return r.bmcTrust
}

// dialBMC opens a TLS connection to a BMC at addr and verifies its
// certificate before returning it. A certificate of an authority the pool
// does not know is checked once more against the CA read again from the
// API server (the CA may have been replaced since the pool was made), when
// that changed the pool.
func (r *Reconciler) dialBMC(ctx context.Context, network, addr string) (net.Conn, error) {
	if r.BMCCASecret.Name == "" {
		return nil, errors.New("no BMC CA Secret is configured: the BMC's certificate cannot be verified")
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	trust := r.caTrust()
	pool, err := trust.Pool(ctx)
	if err != nil {
		return nil, err
	}
	conn, err := handshake(ctx, network, addr, host, pool)
	var unknown x509.UnknownAuthorityError
	if errors.As(err, &unknown) {
		again, rerr := trust.Reload(ctx)
		if rerr != nil {
			return nil, rerr
		}
		if !again.Equal(pool) {
			conn, err = handshake(ctx, network, addr, host, again)
		}
	}
	if err != nil {
		var verr *tls.CertificateVerificationError
		if errors.As(err, &verr) {
			return nil, fmt.Errorf("the BMC's certificate does not verify against the BMC CA (Secret %s) for host %s, nothing sent: %w", r.BMCCASecret, host, err)
		}
		return nil, fmt.Errorf("TLS handshake with the BMC at %s: %w", addr, err)
	}
	return conn, nil
}

// handshake dials addr and completes a TLS handshake verifying the
// server's certificate for host against pool.
func handshake(ctx context.Context, network, addr, host string, pool *x509.CertPool) (*tls.Conn, error) {
	var d net.Dialer
	raw, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	conn := tls.Client(raw, &tls.Config{RootCAs: pool, ServerName: host, MinVersion: tls.VersionTLS12})
	if err := conn.HandshakeContext(ctx); err != nil {
		_ = raw.Close()
		return nil, err
	}
	return conn, nil
}

// redfishClient is the small part of a Redfish client the upgrade needs:
// find the one ComputerSystem and reset it. Each call authenticates with
// HTTP basic authentication, as redfishtool -S Always does.
type redfishClient struct {
	http     *http.Client
	endpoint string // https://host:port
	user     string
	password string
}

func (c *redfishClient) do(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.endpoint, "/")+path, rd)
	if err != nil {
		return nil, err
	}
	req.SetBasicAuth(c.user, c.password)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	rsp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("redfish %s %s: %w", method, path, err)
	}
	return rsp, nil
}

// system returns the @odata.id of the service's ComputerSystem.
func (c *redfishClient) system(ctx context.Context) (string, error) {
	rsp, err := c.do(ctx, http.MethodGet, "/redfish/v1/Systems", nil)
	if err != nil {
		return "", err
	}
	defer func() { _ = rsp.Body.Close() }()
	if rsp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("redfish GET /redfish/v1/Systems: %s%s", rsp.Status, redfishMessage(rsp.Body))
	}
	var coll struct {
		Members []struct {
			ID string `json:"@odata.id"`
		}
	}
	if err := json.NewDecoder(io.LimitReader(rsp.Body, 1<<20)).Decode(&coll); err != nil {
		return "", fmt.Errorf("redfish GET /redfish/v1/Systems: %w", err)
	}
	if len(coll.Members) != 1 {
		return "", fmt.Errorf("redfish GET /redfish/v1/Systems: %d systems, want 1", len(coll.Members))
	}
	return coll.Members[0].ID, nil
}

// reset posts ComputerSystem.Reset with resetType to the one system.
func (c *redfishClient) reset(ctx context.Context, resetType string) error {
	sys, err := c.system(ctx)
	if err != nil {
		return err
	}
	path := sys + "/Actions/ComputerSystem.Reset"
	rsp, err := c.do(ctx, http.MethodPost, path, map[string]string{"ResetType": resetType})
	if err != nil {
		return err
	}
	defer func() { _ = rsp.Body.Close() }()
	if rsp.StatusCode/100 != 2 {
		return fmt.Errorf("redfish POST %s %s: %s%s", path, resetType, rsp.Status, redfishMessage(rsp.Body))
	}
	return nil
}

// redfishMessage is the first message of a DMTF error body, for errors.
func redfishMessage(body io.Reader) string {
	var e struct {
		Error struct {
			Info []struct{ Message string } `json:"@Message.ExtendedInfo"`
		} `json:"error"`
	}
	if json.NewDecoder(io.LimitReader(body, 1<<16)).Decode(&e) != nil || len(e.Error.Info) == 0 {
		return ""
	}
	return ": " + e.Error.Info[0].Message
}
