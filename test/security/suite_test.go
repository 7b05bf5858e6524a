package security

import (
	"os"
	"testing"
	"time"

	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

var env *testenv.Environment

// One control plane for the suite, with the manager configured as the Helm
// chart configures it in a multi-tenant cluster.
func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{Manager: func(o *setup.Options) {
		o.GracefulShutdownTimeout = 15 * time.Second
	}}, &env))
}
