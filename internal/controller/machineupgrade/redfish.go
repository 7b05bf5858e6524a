package machineupgrade

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

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
