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
	// standbyDirPort is the directory port of TestACMEAnsweredByAStandby's
	// Pebble, allowed from the start.
	standbyDirPort int
	// unreachableDirPort is an allowed directory port nothing listens on
	// (TestACMERegistrationFailed).
	unreachableDirPort int
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
	if standbyDirPort, err = testenv.FreePort(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if unreachableDirPort, err = testenv.FreePort(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The manager talks only to the Pebbles the suite runs (and to a port
	// nothing listens on).
	allowed := []string{pebbletest.DirectoryURL(standbyDirPort), pebbletest.DirectoryURL(unreachableDirPort)}
	if pebbleErr = pebbletest.Available(); pebbleErr == nil {
		pebble, pebbleErr = pebbletest.Start(context.Background(), port)
	}
	if pebble != nil {
		allowed = append(allowed, pebble.Directory)
	}
	code := testenv.Main(m, testenv.Options{Manager: func(o *setup.Options) {
		o.Controllers = []string{"issuer", "clusterissuer", "certificaterequest", "certificate"}
		o.PKI.MinimumCertificateDuration = 2 * time.Second
		o.PKI.ACMEHTTP01BindAddress = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		o.PKI.ClusterResourceNamespace = "default"
		o.PKI.ACMEHTTP01Namespace = http01Namespace
		o.PKI.ACMEAllowedDirectories = allowed
		// The names the tests' namespaced ACME Issuers order (the default
		// allows none: test/security TestNamespacedACMEOrdersOnlyAllowedNames).
		o.PKI.ACMENamespacedDNSNames = []string{"*.example.test", "*.*.example.test"}
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
