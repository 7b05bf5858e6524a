// Package pgload is what the Database benchmarks (bench/databases,
// bench/scale) share on a real PostgreSQL: the PostgresInstance they point
// at it, the Databases they create and wait for, and the out-of-band DROP
// DATABASE whose recreation they time.
package pgload

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
	"github.com/converge-dev/converge/internal/sqlengine"
	"github.com/converge-dev/converge/internal/sqltest"
)

// Instance is the PostgresInstance's name.
const Instance = "pg"

// CreateInstance creates in ns the admin Secret and the PostgresInstance
// "pg" for srv and waits (up to two minutes) until it is Ready.
func CreateInstance(ctx context.Context, c client.Client, ns string, srv *sqltest.Server) error {
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "admin"},
		StringData: map[string]string{"username": srv.AdminUser, "password": srv.AdminPassword}}); err != nil {
		return err
	}
	if err := c.Create(ctx, &sqlv1alpha1.PostgresInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: Instance},
		Spec: sqlv1alpha1.InstanceSpec{Host: srv.Host, Port: int32(srv.Port), AdminSecretRef: sqlv1alpha1.SecretReference{Name: "admin"}}}); err != nil { //nolint:gosec // a loopback port
		return err
	}
	if err := WaitFor(ctx, 2*time.Minute, func() (bool, error) {
		i := &sqlv1alpha1.PostgresInstance{}
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: Instance}, i)
		return err == nil && i.Status.Ready, nil
	}); err != nil {
		return fmt.Errorf("instance: %w", err)
	}
	return nil
}

// DatabaseName is the name of the i-th Database's database on the server
// (its object is bench-<i>).
func DatabaseName(i int) string { return "bench_" + strconv.Itoa(i) }

// CreateAndWait creates the Databases bench-from..bench-(to-1) of the
// instance "pg" in ns and waits (up to timeout, listing them every poll)
// until at least to Databases in ns are Ready; it returns the time from the
// first create.
func CreateAndWait(ctx context.Context, c client.Client, ns string, from, to int, timeout, poll time.Duration) (time.Duration, error) {
	start := time.Now()
	for i := from; i < to; i++ {
		d := &sqlv1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bench-" + strconv.Itoa(i)},
			Spec: sqlv1alpha1.DatabaseSpec{
				InstanceRef:  sqlv1alpha1.InstanceReference{APIVersion: sqlv1alpha1.GroupVersion.String(), Kind: "PostgresInstance", Name: Instance},
				DatabaseName: DatabaseName(i),
			}}
		if err := c.Create(ctx, d); err != nil {
			return 0, err
		}
	}
	err := waitEvery(ctx, timeout, poll, func() (bool, error) {
		list := &sqlv1alpha1.DatabaseList{}
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			return false, err
		}
		ready := 0
		for i := range list.Items {
			if meta.IsStatusConditionTrue(list.Items[i].Status.Conditions, sqlv1alpha1.ReadyCondition) {
				ready++
			}
		}
		return ready >= to, nil
	})
	return time.Since(start), err
}

// DropAndWait drops database name behind the controller's back and times
// its recreation (up to five minutes).
func DropAndWait(ctx context.Context, srv *sqltest.Server, name string) (time.Duration, error) {
	db, err := sqlengine.OpenDB(srv.Admin())
	if err != nil {
		return 0, err
	}
	defer func() { _ = db.Close() }()
	if _, err := db.ExecContext(ctx, `DROP DATABASE "`+name+`" WITH (FORCE)`); err != nil {
		return 0, err
	}
	start := time.Now()
	err = WaitFor(ctx, 5*time.Minute, func() (bool, error) {
		var n int
		err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM pg_database WHERE datname = $1", name).Scan(&n)
		return n == 1, err
	})
	return time.Since(start), err
}

// WaitFor calls f every 20 ms until it says true, fails, timeout passes or
// ctx ends.
func WaitFor(ctx context.Context, timeout time.Duration, f func() (bool, error)) error {
	return waitEvery(ctx, timeout, 20*time.Millisecond, f)
}

// waitEvery is apimachinery's poll: f at once, then every every.
func waitEvery(ctx context.Context, timeout, every time.Duration, f func() (bool, error)) error {
	return wait.PollUntilContextTimeout(ctx, every, timeout, true, func(context.Context) (bool, error) { return f() })
}
