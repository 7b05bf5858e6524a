package databasebackup_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/converge-dev/converge/internal/controller/databasebackup"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/sqltest"
	"github.com/converge-dev/converge/internal/testenv"
)

var (
	env       *testenv.Environment
	pg, maria *sqltest.Server
	backupDir string
)

// The suite's manager runs the instance and Database controllers (which
// restore from backupDir); each test starts the backup controller itself,
// so it can make it fail or kill it mid-deletion. Databases, instances and
// Secrets are written by env.Tenant (the documented tenant rights only).
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "converge-backups-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	backupDir = dir
	code := sqltest.Main(func() int {
		return testenv.Main(m, testenv.Options{TenantServiceAccount: "tenant", Manager: func(o *setup.Options) {
			o.Controllers = []string{"postgresinstance", "mariadbinstance", "database"}
			o.DatabaseObserveInterval = 5 * time.Second
			o.BackupDir = backupDir
		}}, &env)
	}, &pg, &maria)
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// startBackupController runs the backup controller as `converge run` does,
// through setup, with dir as the backup store, until the test ends.
func startBackupController(t *testing.T, dir string) {
	t.Helper()
	env.StartManager(t, func(o *setup.Options) {
		o.Controllers = []string{databasebackup.ControllerName}
		o.BackupDir = dir
	})
}

// startHookedBackupController runs the controller with a hook between the
// dump and the finalizer removal; stop kills it.
func startHookedBackupController(t *testing.T, dir string, hook func(context.Context) error) (stop func()) {
	t.Helper()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme: setup.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &databasebackup.Reconciler{BackupDir: dir}
	databasebackup.SetBeforeRelease(r, hook)
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	return run(t, mgr)
}

func run(t *testing.T, mgr ctrl.Manager) func() {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("backup manager: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}
