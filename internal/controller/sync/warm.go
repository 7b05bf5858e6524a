package sync

import (
	"context"
	"fmt"

	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
)

// warmDriftWatches starts the drift watches of every kind in every Sync's
// inventory as soon as the Syncs are cached, on every replica: a standby
// (its controller warmed up, see --leader-elect) then holds the applied
// objects' metadata before it wins the Lease, and its first reconcile finds
// what drifted while the Lease changed hands without listing the world. It
// needs no leader: it only reads. The watches are bounded as the leader's:
// metadata only, objects labelled by a Sync.
func (r *Reconciler) warmDriftWatches(mgr ctrl.Manager) error {
	return mgr.Add(warmRunnable(func(ctx context.Context) error {
		inf, err := mgr.GetCache().GetInformer(ctx, &gitopsv1alpha1.Sync{})
		if err != nil {
			return fmt.Errorf("informer of Syncs for the drift watches: %w", err)
		}
		ensure := func(o any) {
			sy, ok := o.(*gitopsv1alpha1.Sync)
			if !ok || len(sy.Status.Inventory) == 0 {
				return
			}
			if err := r.drift.ensure(sy.Status.Inventory); err != nil {
				ctrl.LoggerFrom(ctx).Error(err, "Watching inventory kinds for drift", "Sync", sy.Namespace+"/"+sy.Name)
			}
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    ensure,
			UpdateFunc: func(_, o any) { ensure(o) },
		}); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	}))
}

// warmRunnable runs on every replica, leader or not.
type warmRunnable func(ctx context.Context) error

func (f warmRunnable) Start(ctx context.Context) error { return f(ctx) }

// NeedLeaderElection is false: warming caches only reads.
func (warmRunnable) NeedLeaderElection() bool { return false }

var _ manager.LeaderElectionRunnable = warmRunnable(nil)
