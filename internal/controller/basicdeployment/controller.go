// Package basicdeployment implements the BasicDeployment controller: it rolls
// a Pod template out through BasicReplicaSets, one per template revision,
// with the RollingUpdate or Recreate strategy, keeps a bounded history for
// rollback, and reports progress as apps/v1 Deployments do. It reads and
// writes BasicReplicaSets' spec and reads their status; it never touches
// Pods, which are the BasicReplicaSet controller's business.
package basicdeployment

import (
	"context"
	"errors"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	workloadsv1alpha1 "github.com/converge-dev/converge/api/workloads/v1alpha1"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

// ControllerName is the name used with --controllers, in logs and metrics.
const ControllerName = "basicdeployment"

// FieldManager is the field manager of every write this controller makes.
const FieldManager = "converge-basicdeployment"

// +kubebuilder:rbac:groups=workloads.converge.dev,resources=basicdeployments,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=workloads.converge.dev,resources=basicdeployments/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=workloads.converge.dev,resources=basicdeployments/finalizers,verbs=update
// +kubebuilder:rbac:groups=workloads.converge.dev,resources=basicreplicasets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconciler reconciles BasicDeployments.
type Reconciler struct {
	client.Client
	// APIReader reads past the cache, to tell a stale cache from a name
	// collision when a create reports AlreadyExists.
	APIReader client.Reader
	// Recorder emits Events; set by SetupWithManager.
	Recorder events.EventRecorder
	// MaxConcurrentReconciles defaults to 5.
	MaxConcurrentReconciles int
	// now is the clock; tests may replace it.
	now func() time.Time
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Client = mgr.GetClient()
	r.APIReader = mgr.GetAPIReader()
	r.Recorder = mgr.GetEventRecorder(ControllerName)
	if r.now == nil {
		r.now = time.Now
	}
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = 5
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&workloadsv1alpha1.BasicDeployment{}).
		Watches(&workloadsv1alpha1.BasicReplicaSet{}, handler.EnqueueRequestsFromMapFunc(r.parentsOf)).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Complete(r)
}

// parentsOf maps a BasicReplicaSet to its controlling BasicDeployment or,
// for an orphan, to every BasicDeployment whose selector matches it, so one
// can adopt it.
func (r *Reconciler) parentsOf(ctx context.Context, obj client.Object) []reconcile.Request {
	if ref := metav1.GetControllerOf(obj); ref != nil {
		if ref.Kind != "BasicDeployment" || ref.APIVersion != workloadsv1alpha1.GroupVersion.String() {
			return nil
		}
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: obj.GetNamespace(), Name: ref.Name}}}
	}
	if obj.GetDeletionTimestamp() != nil {
		return nil
	}
	list := &workloadsv1alpha1.BasicDeploymentList{}
	if err := r.List(ctx, list, client.InNamespace(obj.GetNamespace())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		sel, err := metav1.LabelSelectorAsSelector(list.Items[i].Spec.Selector)
		if err == nil && !sel.Empty() && sel.Matches(labels.Set(obj.GetLabels())) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return out
}

// Reconcile drives one BasicDeployment's BasicReplicaSets towards its spec.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	d := &workloadsv1alpha1.BasicDeployment{}
	if err := r.Get(ctx, req.NamespacedName, d); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !d.DeletionTimestamp.IsZero() {
		// The garbage collector deletes the BasicReplicaSets (and they their
		// Pods) through ownerReferences, honouring --cascade.
		return ctrl.Result{}, nil
	}
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("BasicDeployment", klog.KObj(d)))
	s := &scope{d: d, now: r.now()}
	base := d.DeepCopy()
	// The kit's patcher sends nothing when the status did not change.
	patcher := creconcile.NewStatusPatcher(r.Client, d)
	defer func() {
		computeStatus(s, &base.Status)
		if retErr == nil {
			d.Status.ObservedGeneration = d.Generation
			res.RequeueAfter = s.requeueAfter
		}
		retErr = errors.Join(retErr, patcher.Patch(ctx, d))
	}()
	return ctrl.Result{}, r.reconcileReplicaSets(ctx, s)
}
