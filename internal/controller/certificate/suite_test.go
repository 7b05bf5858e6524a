package certificate_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/converge-dev/converge/internal/acme/pebbletest"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

var (
	env    *testenv.Environment
	pebble *pebbletest.Pebble
	// pebbleErr says why Pebble is not running.
	pebbleErr error
)

// http01Namespace is where the suite's manager publishes pending HTTP-01
// answers (TestACMEAnsweredByAStandby).
const http01Namespace = "default"

// The suite runs the four pki controllers with a 2s minimum duration (tests
// renew in seconds; production keeps 1h), the ACME HTTP-01 listener on a free
// loopback port, and a real Pebble validating challenges against it.
func TestMain(m *testing.M) {
	port, err := testenv.FreePort()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if pebbleErr = pebbletest.Available(); pebbleErr == nil {
		pebble, pebbleErr = pebbletest.Start(context.Background(), port)
	}
	code := testenv.Main(m, testenv.Options{Manager: func(o *setup.Options) {
		o.Controllers = []string{"issuer", "clusterissuer", "certificaterequest", "certificate"}
		o.PKI.MinimumCertificateDuration = 2 * time.Second
		o.PKI.ACMEHTTP01BindAddress = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		o.PKI.ClusterResourceNamespace = "default"
		o.PKI.ACMEHTTP01Namespace = http01Namespace
	}}, &env)
	if pebble != nil {
		pebble.Stop()
	}
	os.Exit(code)
}

// needPebble skips outside CI when Pebble is not installed.
func needPebble(t *testing.T) {
	t.Helper()
	if pebble == nil {
		if os.Getenv("CI") == "" {
			t.Skipf("*** SKIPPING ACME test: %v ***", pebbleErr)
		}
		t.Fatalf("pebble: %v", pebbleErr)
	}
}
