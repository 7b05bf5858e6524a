package database_test

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
// plane (with the garbage collector, for owned Secrets). The backup
// controller is not part of it: this controller must work alone. Every
// Database, instance and Secret is written by env.Tenant, the namespace's
// "tenant" ServiceAccount with only the documented tenant rights.
func TestMain(m *testing.M) {
	os.Exit(sqltest.Main(func() int {
		return testenv.Main(m, testenv.Options{ControllerManager: true, TenantServiceAccount: "tenant", Manager: func(o *setup.Options) {
			o.Controllers = []string{"postgresinstance", "mariadbinstance", "database"}
			o.DatabaseObserveInterval = 2 * time.Second
			o.SQLInstanceHealthInterval = time.Hour // the unreachable test needs the instance to stay Ready
		}}, &env)
	}, &pg, &maria))
}
