// Command databases measures the Database controller on a real, throwaway
// PostgreSQL 15 (started like the tests start it) and a local control plane
// (internal/testenv, with the manager in this process):
//
//   - the floor: a plain loop running, for -n databases, the statements a
//     Database needs (CREATE ROLE, CREATE DATABASE, GRANT, a login as the
//     owner with SELECT 1), one after the other; and the same loop split
//     over 4 goroutines (the controller's concurrency and default pool size);
//   - the same -n Databases created through the API server, until every one
//     is Ready (which the controller only says after the owner logged in);
//     and the ratio of the two;
//   - the time from an out-of-band DROP DATABASE to the database existing
//     again, p50/p99 over -drops drops, against the observe interval
//     (-observe; the instance's observer takes one snapshot per interval);
//   - the manager's resident memory (this process: the manager, its cache
//     and pools, and the benchmark's own client) with -rss-n Databases;
//   - with those -rss-n Databases Ready, the SQL statements per second the
//     server receives at idle (pg_stat_database transactions: each
//     autocommit statement is one), against the per-Database design it
//     replaced: the statements of one full reconcile, measured in the same
//     run, times the Databases, every 60 s.
//
// It prints figures and asserts nothing. Run it from the repository root:
//
//	go run ./bench/databases -n 100 -rss-n 1000
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
	"github.com/converge-dev/converge/bench/internal/benchout"
	"github.com/converge-dev/converge/bench/internal/floors"
	"github.com/converge-dev/converge/bench/internal/pgload"
	"github.com/converge-dev/converge/internal/controller/database"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/sqlengine"
	"github.com/converge-dev/converge/internal/sqltest"
	"github.com/converge-dev/converge/internal/testenv"
)

func main() {
	n := flag.Int("n", 100, "Databases to provision (floor and controller)")
	rssN := flag.Int("rss-n", 1000, "Databases for the memory figure; 0 skips it")
	observe := flag.Duration("observe", 10*time.Second, "the controller's observe interval (--database-observe-interval)")
	flag.IntVar(&drops, "drops", 10, "out-of-band DROP DATABASEs for the drop -> recreated latency")
	flag.Parse()
	ctrl.SetLogger(logr.Discard())
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *n, *rssN, *observe)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "databases:", err)
		os.Exit(1)
	}
}

var drops int

func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

func run(ctx context.Context, n, rssN int, observe time.Duration) error {
	logf("starting PostgreSQL")
	srv, err := sqltest.StartPostgres(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = srv.Stop() }()

	floor, err := floors.Databases(ctx, srv, n, 1)
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	floorPar, err := floors.Databases(ctx, srv, n, 4)
	if err != nil {
		return fmt.Errorf("parallel floor: %w", err)
	}

	logf("starting the control plane and the manager")
	env, err := testenv.Start(ctx, testenv.Options{Manager: func(o *setup.Options) {
		o.Controllers = []string{"postgresinstance", "database"}
		o.DatabaseObserveInterval = observe
	}})
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	c := env.Client
	ns := "bench"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	if err := pgload.CreateInstance(ctx, c, ns, srv); err != nil {
		return err
	}

	ctrlTime, err := createAndWait(ctx, c, ns, 0, n)
	if err != nil {
		return err
	}

	var lat []time.Duration
	for i := range min(drops, n) {
		d, err := pgload.DropAndWait(ctx, srv, pgload.DatabaseName(i))
		if err != nil {
			return err
		}
		lat = append(lat, d)
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }

	fmt.Printf("Databases on PostgreSQL %s, %d cores, GOMAXPROCS %d\n", serverVersion(ctx, srv), runtime.NumCPU(), runtime.GOMAXPROCS(0))
	fmt.Printf("  floor: plain SQL loop, %d x (CREATE ROLE, CREATE DATABASE, GRANT, owner login + SELECT 1): %v (%v each)\n",
		n, floor.Round(time.Millisecond), (floor / time.Duration(n)).Round(time.Microsecond))
	fmt.Printf("  controller: %d Databases created through the API to all Ready:                        %v (%v each)\n",
		n, ctrlTime.Round(time.Millisecond), (ctrlTime / time.Duration(n)).Round(time.Microsecond))
	fmt.Printf("  floor with 4 workers (the controller's concurrency and pool size):                %v\n", floorPar.Round(time.Millisecond))
	fmt.Printf("  ratio controller / floor: %.2fx (target <= 2x); against the 4-worker floor: %.2fx\n",
		float64(ctrlTime)/float64(floor), float64(ctrlTime)/float64(floorPar))
	fmt.Printf("  out-of-band DROP DATABASE -> recreated, %d drops: p50 %v, p99 %v (observe interval %v; target <= interval + 1s)\n",
		len(lat), q(0.5).Round(time.Millisecond), q(0.99).Round(time.Millisecond), observe)
	benchout.Ratio(fmt.Sprintf("databases.create_%d_ready_vs_floor", n), ctrlTime.Seconds(), "s", float64(ctrlTime)/float64(floor))
	benchout.Ratio("databases.drop_recreated_p50", float64(q(0.5).Milliseconds()), "ms", q(0.5).Seconds()/observe.Seconds())
	benchout.Ratio("databases.drop_recreated_p99", float64(q(0.99).Milliseconds()), "ms", q(0.99).Seconds()/observe.Seconds())

	if rssN > n {
		t, err := createAndWait(ctx, c, ns, n, rssN)
		if err != nil {
			return err
		}
		runtime.GC()
		time.Sleep(2 * observe) // a full observe cycle over every Database
		fmt.Printf("  %d Databases to all Ready (created after the first %d were Ready): %v\n", rssN-n, n, t.Round(time.Millisecond))
		fmt.Printf("  manager process RSS with %d Ready Databases, after two observe cycles: %s (peak %s)\n",
			rssN, procStatus("VmRSS"), procStatus("VmHWM"))
		if kb, err := strconv.ParseFloat(strings.Fields(procStatus("VmRSS") + " x")[0], 64); err == nil {
			benchout.Line(fmt.Sprintf("databases.rss_%d_ready", rssN), kb/1024, "MiB")
		}
		if err := idleLoad(ctx, c, srv, ns, rssN, observe); err != nil {
			return err
		}
	}
	return nil
}

// transactions is the server's committed and rolled back transactions so
// far (each autocommit statement is one), minus the reading itself.
func transactions(ctx context.Context, db *sql.DB) (float64, error) {
	var n float64
	// pg_stat_database is refreshed from the backends' flushed counters:
	// a new snapshot each time, not the transaction-cached one.
	if _, err := db.ExecContext(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		return 0, err
	}
	err := db.QueryRowContext(ctx, "SELECT sum(xact_commit + xact_rollback) FROM pg_stat_database").Scan(&n)
	return n, err
}

// idleLoad prints the statements per second the server receives with
// every Database Ready and nothing changing, over three observe intervals,
// and the statements of one full reconcile of one Database.
func idleLoad(ctx context.Context, c client.Client, srv *sqltest.Server, ns string, count int, observe time.Duration) error {
	db, err := sqlengine.OpenDB(srv.Admin())
	if err != nil {
		return err
	}
	defer func() { _ = db.Close() }()
	db.SetMaxOpenConns(1)
	time.Sleep(11 * time.Second) // PostgreSQL flushes an idle backend's counters within 10 s
	t0, err := transactions(ctx, db)
	if err != nil {
		return err
	}
	window := 3 * observe
	start := time.Now()
	time.Sleep(window)
	t1, err := transactions(ctx, db)
	if err != nil {
		return err
	}
	idle := (t1 - t0 - 2) / time.Since(start).Seconds() // minus our own two statements
	// One full reconcile, requested, on an otherwise idle manager.
	d := &sqlv1alpha1.Database{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "bench-0"}, d); err != nil {
		return err
	}
	base := d.DeepCopy()
	if d.Annotations == nil {
		d.Annotations = map[string]string{}
	}
	d.Annotations[sqlv1alpha1.ReconcileRequestedAtAnnotation] = time.Now().Format(time.RFC3339Nano)
	// The Database's status records nothing when an observation finds
	// what the last one did; the manager's reconcile count says the
	// requested reconcile ran.
	before, err := testenv.ReconcileCount(database.ControllerName)
	if err != nil {
		return err
	}
	r0, err := transactions(ctx, db)
	if err != nil {
		return err
	}
	if err := c.Patch(ctx, d, client.MergeFrom(base)); err != nil {
		return err
	}
	if err := pgload.WaitFor(ctx, time.Minute, func() (bool, error) {
		n, err := testenv.ReconcileCount(database.ControllerName)
		return n > before, err
	}); err != nil {
		return fmt.Errorf("waiting for the requested reconcile: %w", err)
	}
	time.Sleep(11 * time.Second)
	r1, err := transactions(ctx, db)
	if err != nil {
		return err
	}
	perReconcile := r1 - r0 - 2
	perDatabase := perReconcile * float64(count) / 60
	fmt.Printf("  idle, %d Ready Databases, over %v: %.1f SQL statements/s (observe interval %v; one full reconcile is %.0f statements, so one per Database every 60 s would be %.1f/s)\n",
		count, window, idle, observe, perReconcile, perDatabase)
	benchout.Ratio(fmt.Sprintf("databases.idle_statements_per_s_%d", count), idle, "statements/s", idle/perDatabase)
	return nil
}

// createAndWait creates Databases bench-from..bench-(to-1) and waits until
// all of them are Ready.
func createAndWait(ctx context.Context, c client.Client, ns string, from, to int) (time.Duration, error) {
	logf("creating %d Databases", to-from)
	return pgload.CreateAndWait(ctx, c, ns, from, to, 30*time.Minute, 20*time.Millisecond)
}

func serverVersion(ctx context.Context, srv *sqltest.Server) string {
	v, err := sqlengine.Ping(ctx, srv.Admin())
	if err != nil {
		return "?"
	}
	return strings.Fields(v)[0]
}

func procStatus(key string) string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, key+":") {
			return strings.TrimSpace(strings.TrimPrefix(line, key+":"))
		}
	}
	return "?"
}
