package machineupgrade

import (
	"bytes"
	"context"
	"crypto/tls"
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
// BMC is verified against the CA kept in BMCCASecret (read at each new
// connection, uncached: the manager's namespace, which tenants cannot
// write) and against the host of the endpoint dialled. A BMC whose
// certificate does not verify gets no request, so neither the credentials
// nor a command reach whoever answers in its place.
func (r *Reconciler) newRedfishHTTPClient() *http.Client {
	return &http.Client{
		Timeout: DefaultPowerCycleTimeout,
		Transport: &http.Transport{
			DialTLSContext:      r.dialBMC,
			MaxIdleConnsPerHost: 2,
		},
	}
}

// dialBMC opens a TLS connection to a BMC at addr and verifies its
// certificate before returning it.
func (r *Reconciler) dialBMC(ctx context.Context, network, addr string) (net.Conn, error) {
	if r.BMCCASecret.Name == "" {
		return nil, errors.New("no BMC CA Secret is configured: the BMC's certificate cannot be verified")
	}
	pool, err := bmc.ReadCAPool(ctx, r.APIReader, r.BMCCASecret)
	if err != nil {
		return nil, err
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	raw, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	conn := tls.Client(raw, &tls.Config{RootCAs: pool, ServerName: host, MinVersion: tls.VersionTLS12})
	if err := conn.HandshakeContext(ctx); err != nil {
		_ = raw.Close()
		var verr *tls.CertificateVerificationError
		if errors.As(err, &verr) {
			return nil, fmt.Errorf("the BMC's certificate does not verify against the BMC CA (Secret %s) for host %s, nothing sent: %w", r.BMCCASecret, host, err)
		}
		return nil, fmt.Errorf("TLS handshake with the BMC at %s: %w", addr, err)
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
