package security

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/converge-dev/converge/internal/acme"
	"github.com/converge-dev/converge/internal/acme/pebbletest"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

var env *testenv.Environment

// One control plane for the suite, with the manager configured as the Helm
// chart configures it by default (charts/converge/values.yaml).
func TestMain(m *testing.M) {
	trap = startACMETrap()
	port, err := testenv.FreePort()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pebbleDirPort = port
	code := testenv.Main(m, testenv.Options{Manager: chartDefaults}, &env)
	trap.Close()
	os.Exit(code)
}

// chartDefaults configures the manager as the chart's default values do:
// every controller, cross-namespace references refused, and Syncs in
// lockdown, acting as the "default" ServiceAccount of their namespace when
// they name none (gitops.lockdown, gitops.defaultServiceAccount).
func chartDefaults(o *setup.Options) {
	o.Controllers = []string{"*"}
	o.GitOps.AllowCrossNamespaceRefs = false
	o.GitOps.Lockdown = true
	o.GitOps.DefaultServiceAccount = "default"
	// Go's http.Server.Shutdown waits up to 5s for a connection the API
	// server just opened to the webhook server; leave room for it.
	o.GracefulShutdownTimeout = 15 * time.Second
	// The chart's ACME directories, the suite's loopback ACME server
	// under one prefix (pki_test.go), and the Pebble a test starts on
	// pebbleDirPort (round8_acme_test.go).
	o.PKI.ACMEAllowedDirectories = append(slices.Clone(acme.DefaultAllowedDirectories), trap.AllowedPrefix(), pebbletest.DirectoryURL(pebbleDirPort))
	// Below the chart's 512 (--lb-max-assignments-per-pool), so that
	// TestPoolAssignmentsAreBounded fills a pool with 16 Services, not 512
	// (six minutes when each pool change re-read every holder; the pool
	// reconciler now reads them from the cache,
	// TestPoolFillReadsHoldersFromTheCache). The one setting of the suite
	// that is not the chart's.
	o.LBMaxAssignmentsPerPool = suiteMaxAssignmentsPerPool
}

// pebbleDirPort is where a test's Pebble serves its directory: allowed by
// the suite's manager, chosen before it starts.
var pebbleDirPort int

// suiteMaxAssignmentsPerPool is the suite's --lb-max-assignments-per-pool.
const suiteMaxAssignmentsPerPool = 16
