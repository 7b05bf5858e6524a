package floors

import (
	"context"
	"strconv"
	"time"

	"github.com/converge-dev/converge/internal/sqlengine"
	"github.com/converge-dev/converge/internal/sqltest"
)

// Databases runs on srv the statements n Databases need (CREATE ROLE,
// CREATE DATABASE, GRANT, a login as the owner with SELECT 1), in a plain
// loop split over workers goroutines, then drops what it made (not timed):
// a Database's floor (bench/databases, bench/scale).
func Databases(ctx context.Context, srv *sqltest.Server, n, workers int) (time.Duration, error) {
	var pools sqlengine.Pools
	defer pools.Close()
	admin, err := pools.Admin(srv.Admin())
	if err != nil {
		return 0, err
	}
	if _, err := admin.Ping(ctx); err != nil {
		return 0, err
	}
	spec := func(i int) sqlengine.Spec {
		return sqlengine.Spec{Name: "floor_" + strconv.Itoa(i), Owner: "floor_" + strconv.Itoa(i) + "_owner", Charset: "UTF8"}
	}
	one := func(i int) error {
		sp := spec(i)
		if err := admin.CreateRole(ctx, sp.Owner, "pw"+strconv.Itoa(i), sqlengine.Claim{}); err != nil {
			return err
		}
		if err := admin.CreateDatabase(ctx, sp); err != nil {
			return err
		}
		if err := admin.Grant(ctx, sp); err != nil {
			return err
		}
		return sqlengine.CheckLogin(ctx, srv.Config(sp.Owner, "pw"+strconv.Itoa(i), sp.Name))
	}
	start := time.Now()
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			for i := w; i < n; i += workers {
				if err := one(i); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			return 0, err
		}
	}
	d := time.Since(start)
	for i := range n {
		if err := admin.Drop(ctx, spec(i)); err != nil {
			return 0, err
		}
	}
	return d, nil
}
