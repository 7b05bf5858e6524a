package lbipam_test

import (
	"os"
	"testing"

	"github.com/converge-dev/converge/internal/testenv"
)

var env *testenv.Environment

// The suite serves webhooks only; each test starts its own manager with the
// loadbalancer-ipam controller, configured as the test needs.
func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{NoManager: true}, &env))
}
