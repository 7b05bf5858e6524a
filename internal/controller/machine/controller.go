package machine

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	machinespec "github.com/converge-dev/converge/internal/machine/spec"
	pcontract "github.com/converge-dev/converge/pkg/contract"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

// ControllerName is the controller's name (for --controllers and metrics).
const ControllerName = "machine"

// FieldManager is the field manager of the controller's writes.
const FieldManager = "converge-machine"

// Index names.
const (
	// infraIndex indexes Machines by "group/Kind/name" of infrastructureRef.
	infraIndex = "spec.infrastructureRef"
	// macIndex indexes Machines by effective MAC address.
	macIndex = "spec.networkInterfaces.macAddress"
	// providerIDIndex indexes Machines by status.providerID.
	providerIDIndex = "status.providerID"
	// nodeProviderIDIndex indexes Nodes by spec.providerID.
	nodeProviderIDIndex = "spec.providerID"
)

// DefaultDrainTimeout bounds a drain; after it the deletion goes on (with a
// DrainTimeout Event).
const DefaultDrainTimeout = 10 * time.Minute

// Event reasons.
const (
	// EventDrainTimeout: the drain did not finish in time.
	EventDrainTimeout = "DrainTimeout"
	// EventEvicted: a Pod was evicted by the drain.
	EventEvicted = "Evicted"
)

// Reconciler reconciles Machines.
type Reconciler struct {
	client.Client
	// APIReader reads uncached (Pods on a Node during a drain).
	APIReader client.Reader
	// Recorder records Events.
	Recorder events.EventRecorder
	// DrainTimeout bounds a drain; DefaultDrainTimeout when zero.
	DrainTimeout time.Duration
	// MaxConcurrentReconciles; 8 when zero.
	MaxConcurrentReconciles int
	// Contracts decides, from the cache, whether a kind declares the
	// infrastructure-machine contract; SetupWithManager fills it.
	Contracts pcontract.Checker

	// providers watches each provider kind once a Machine refers to it, so
	// that the controller never needs to know the providers in advance.
	providers *creconcile.KindWatcher
}

// +kubebuilder:rbac:groups=machine.converge.dev,resources=machines,verbs=get;list;watch;patch;update
// +kubebuilder:rbac:groups=machine.converge.dev,resources=machines/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=machine.converge.dev,resources=machines/finalizers,verbs=update
// +kubebuilder:rbac:groups=infrastructure.converge.dev,resources=qemumachines;kwokmachines,verbs=get;list;watch;patch;update;delete
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list
// +kubebuilder:rbac:groups="",resources=pods/eviction,verbs=create
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the controller, its indexes and watches.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Client = mgr.GetClient()
	r.APIReader = mgr.GetAPIReader()
	r.Recorder = mgr.GetEventRecorder(ControllerName)
	r.Contracts = pcontract.Checker{Reader: mgr.GetCache(), Mapper: mgr.GetRESTMapper()}
	if r.DrainTimeout == 0 {
		r.DrainTimeout = DefaultDrainTimeout
	}
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = 8
	}
	ctx := context.Background() //nolint:forbidigo // index registration has no request context
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &machinev1alpha1.Machine{}, infraIndex, func(o client.Object) []string {
		return []string{infraKey(o.(*machinev1alpha1.Machine).Spec.InfrastructureRef)}
	}); err != nil {
		return fmt.Errorf("indexing %s: %w", infraIndex, err)
	}
	if err := idx.IndexField(ctx, &machinev1alpha1.Machine{}, macIndex, func(o client.Object) []string {
		return macKeys(o.(*machinev1alpha1.Machine))
	}); err != nil {
		return fmt.Errorf("indexing %s: %w", macIndex, err)
	}
	if err := idx.IndexField(ctx, &machinev1alpha1.Machine{}, providerIDIndex, func(o client.Object) []string {
		if id := o.(*machinev1alpha1.Machine).Status.ProviderID; id != "" {
			return []string{id}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing %s: %w", providerIDIndex, err)
	}
	if err := idx.IndexField(ctx, &corev1.Node{}, nodeProviderIDIndex, func(o client.Object) []string {
		if id := o.(*corev1.Node).Spec.ProviderID; id != "" {
			return []string{id}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing Nodes by %s: %w", nodeProviderIDIndex, err)
	}
	c, err := ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&machinev1alpha1.Machine{}).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.machinesForNode)).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Build(r)
	if err != nil {
		return err
	}
	r.providers = creconcile.NewKindWatcher(c, mgr.GetCache(), r.machinesForInfrastructure)
	// Machines sharing a MAC are re-checked when one of them changes.
	if err := c.Watch(source.Kind(mgr.GetCache(), client.Object(&machinev1alpha1.Machine{}),
		handler.EnqueueRequestsFromMapFunc(r.machinesSharingMACs))); err != nil {
		return fmt.Errorf("watching Machines for MAC conflicts: %w", err)
	}
	return nil
}

func infraKey(ref machinev1alpha1.InfrastructureReference) string {
	gv, _ := schema.ParseGroupVersion(ref.APIVersion)
	return gv.Group + "/" + ref.Kind + "/" + ref.Name
}

func (r *Reconciler) requests(ctx context.Context, opts ...client.ListOption) []reconcile.Request {
	list := &machinev1alpha1.MachineList{}
	if err := r.List(ctx, list, opts...); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return out
}

func (r *Reconciler) machinesForInfrastructure(ctx context.Context, o client.Object) []reconcile.Request {
	gvk := o.GetObjectKind().GroupVersionKind()
	return r.requests(ctx, client.InNamespace(o.GetNamespace()),
		client.MatchingFields{infraIndex: gvk.Group + "/" + gvk.Kind + "/" + o.GetName()})
}

func (r *Reconciler) machinesForNode(ctx context.Context, o client.Object) []reconcile.Request {
	id := o.(*corev1.Node).Spec.ProviderID
	if id == "" {
		return nil
	}
	return r.requests(ctx, client.MatchingFields{providerIDIndex: id})
}

func (r *Reconciler) machinesSharingMACs(ctx context.Context, o client.Object) []reconcile.Request {
	m := o.(*machinev1alpha1.Machine)
	var out []reconcile.Request
	for _, mac := range macKeys(m) {
		for _, req := range r.requests(ctx, client.MatchingFields{macIndex: mac}) {
			if req.NamespacedName != client.ObjectKeyFromObject(m) {
				out = append(out, req)
			}
		}
	}
	return out
}

// macKeys indexes a Machine by its effective MACs.
func macKeys(m *machinev1alpha1.Machine) []string {
	nics := machinespec.EffectiveNICs(m)
	out := make([]string, 0, len(nics))
	for _, n := range nics {
		out = append(out, n.MACAddress)
	}
	return out
}
