package gitrepository_test

import (
	"os"
	"testing"

	"github.com/converge-dev/converge/internal/testenv"
)

var env *testenv.Environment

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{}, &env))
}
