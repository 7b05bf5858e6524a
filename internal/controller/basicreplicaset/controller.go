// Package basicreplicaset implements the BasicReplicaSet controller: it keeps
// spec.replicas Pods matching the template running, adopting matching orphans
// and creating or deleting Pods in bounded batches, and reports status as
// counts and conditions. It reads and writes Pods and its own status only; a
// BasicDeployment drives it solely through spec.replicas and spec.template.
package basicreplicaset

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	workloadsv1alpha1 "github.com/converge-dev/converge/api/workloads/v1alpha1"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

// ControllerName is the name used with --controllers, in logs and metrics.
const ControllerName = "basicreplicaset"

// FieldManager is the field manager of every write this controller makes.
const FieldManager = "converge-basicreplicaset"

// +kubebuilder:rbac:groups=workloads.converge.dev,resources=basicreplicasets,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=workloads.converge.dev,resources=basicreplicasets/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=workloads.converge.dev,resources=basicreplicasets/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconciler reconciles BasicReplicaSets.
type Reconciler struct {
	client.Client
	// Recorder emits Events; set by SetupWithManager.
	Recorder events.EventRecorder
	// MaxConcurrentReconciles defaults to 5.
	MaxConcurrentReconciles int

	exp *expectations
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Client = mgr.GetClient()
	r.Recorder = mgr.GetEventRecorder(ControllerName)
	r.exp = newExpectations()
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = 5
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&workloadsv1alpha1.BasicReplicaSet{}).
		Watches(&corev1.Pod{}, handler.Funcs{
			CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				r.podEvent(ctx, e.Object, q, true, false)
			},
			UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				// A Pod marked for deletion is as good as gone for scaling, as
				// in kube-controller-manager: do not wait out its grace period.
				marked := e.ObjectOld.GetDeletionTimestamp() == nil && e.ObjectNew.GetDeletionTimestamp() != nil
				r.podEvent(ctx, e.ObjectOld, q, false, false)
				r.podEvent(ctx, e.ObjectNew, q, false, marked)
			},
			DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				r.podEvent(ctx, e.Object, q, false, true)
			},
		}).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Complete(r)
}

// podEvent records observed creations and deletions against the owning
// BasicReplicaSet's expectations and queues it; for an orphan it queues every
// BasicReplicaSet whose selector matches, so one can adopt it.
func (r *Reconciler) podEvent(ctx context.Context, obj client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request], created, deleted bool) {
	if ref := metav1.GetControllerOf(obj); ref != nil {
		if ref.Kind != "BasicReplicaSet" || ref.APIVersion != workloadsv1alpha1.GroupVersion.String() {
			return
		}
		key := types.NamespacedName{Namespace: obj.GetNamespace(), Name: ref.Name}
		if created {
			r.exp.creationsObserved(key, 1)
		}
		if deleted {
			r.exp.deletionObserved(key, obj.GetUID())
		}
		q.Add(reconcile.Request{NamespacedName: key})
		return
	}
	if obj.GetDeletionTimestamp() != nil {
		return
	}
	list := &workloadsv1alpha1.BasicReplicaSetList{}
	if err := r.List(ctx, list, client.InNamespace(obj.GetNamespace())); err != nil {
		return
	}
	for i := range list.Items {
		sel, err := metav1.LabelSelectorAsSelector(list.Items[i].Spec.Selector)
		if err == nil && !sel.Empty() && sel.Matches(labels.Set(obj.GetLabels())) {
			q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
}

// Reconcile drives one BasicReplicaSet towards spec.replicas.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	rs := &workloadsv1alpha1.BasicReplicaSet{}
	if err := r.Get(ctx, req.NamespacedName, rs); err != nil {
		if apierrors.IsNotFound(err) {
			r.exp.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !rs.DeletionTimestamp.IsZero() {
		// The garbage collector deletes the Pods through their ownerReferences.
		return ctrl.Result{}, nil
	}
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("BasicReplicaSet", klog.KObj(rs)))
	s := &scope{rs: rs, key: req.NamespacedName, now: time.Now()}
	// The kit's patcher sends nothing when the status did not change.
	patcher := creconcile.NewStatusPatcher(r.Client, rs)
	defer func() {
		computeStatus(s)
		// A create or delete the API refused (quota, a webhook) was acted
		// on and is reported in ReplicaFailure and Ready, as a ReplicaSet
		// does: this generation is observed, so that kstatus reads
		// InProgress with that reason, not a lagging generation.
		if retErr == nil || s.failure != nil {
			rs.Status.ObservedGeneration = rs.Generation
		}
		retErr = errors.Join(retErr, patcher.Patch(ctx, rs))
	}()
	if err := r.reconcilePods(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: s.requeueAfter}, nil
}
