package sqlinstance_test

import (
	"os"
	"testing"
	"time"

	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/sqltest"
	"github.com/converge-dev/converge/internal/testenv"
)

var (
	env       *testenv.Environment
	pg, maria *sqltest.Server
)

// The suite runs real PostgreSQL and MariaDB servers beside the control
// plane; only the sql controllers run.
func TestMain(m *testing.M) {
	os.Exit(sqltest.Main(func() int {
		return testenv.Main(m, testenv.Options{Manager: func(o *setup.Options) {
			o.Controllers = []string{"postgresinstance", "mariadbinstance"}
			o.SQLInstanceHealthInterval = 2 * time.Second
		}}, &env)
	}, &pg, &maria))
}
