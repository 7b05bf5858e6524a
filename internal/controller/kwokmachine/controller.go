// Package kwokmachine is the KwokMachine provider: provisioning registers a
// Node that kwok serves (providerID kwok://<namespace>/<name>), powering off
// takes the Node from kwok and marks it NotReady, powering on hands it back.
// The Node is the tenant's: it carries the label and NoSchedule taint
// machine.converge.dev/namespace=<namespace>, and the annotation naming the
// KwokMachine by namespace, name and UID that the Machine controller checks.
// It honours the infrastructure-machine contract, so that thousands of
// Machines fit on one laptop for scale and upgrade tests.
package kwokmachine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
	machinespec "github.com/converge-dev/converge/internal/machine/spec"
	contract "github.com/converge-dev/converge/pkg/contract/infrastructuremachine"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

// ControllerName is the controller's name.
const ControllerName = "kwokmachine"

// FieldManager is the field manager of the controller's writes.
const FieldManager = "converge-kwokmachine"

const (
	// KwokNodeAnnotation (value "fake") hands a Node to kwok, which then
	// keeps it Ready; without it the Node is nobody's and stays NotReady.
	KwokNodeAnnotation = "kwok.x-k8s.io/node"
	// OwnerAnnotation on a Node names the KwokMachine ("namespace/name")
	// it was registered for; a Node without it is never touched.
	OwnerAnnotation = "infrastructure.converge.dev/kwokmachine"
	// PoweredOffReason is the Node Ready condition's reason while off.
	nodePoweredOffReason = "MachinePoweredOff"
)

// Reconciler reconciles KwokMachines.
type Reconciler struct {
	client.Client
	// MaxConcurrentReconciles; 8 when zero.
	MaxConcurrentReconciles int
}

// +kubebuilder:rbac:groups=infrastructure.converge.dev,resources=kwokmachines,verbs=get;list;watch;patch;update
// +kubebuilder:rbac:groups=infrastructure.converge.dev,resources=kwokmachines/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=infrastructure.converge.dev,resources=kwokmachines/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=nodes/status,verbs=patch
// +kubebuilder:rbac:groups=machine.converge.dev,resources=machines,verbs=get;list;watch

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Client = mgr.GetClient()
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = 8
	}
	ours := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetAnnotations()[OwnerAnnotation] != "" })
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&infrastructurev1alpha1.KwokMachine{}).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			ns, name, ok := strings.Cut(o.GetAnnotations()[OwnerAnnotation], "/")
			if !ok {
				return nil
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}}
		}), builder.WithPredicates(ours)).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Complete(r)
}

// NodeName is the name of a KwokMachine's Node:
// kwok-<namespace>-<name>-<hash of namespace/name> (contract.NodeName).
func NodeName(km *infrastructurev1alpha1.KwokMachine) string {
	return contract.NodeName("kwok", km.Namespace, km.Name)
}

// TenantLabel on a Node names the namespace it was registered for.
const TenantLabel = contract.TenantLabel

// TenantTaint is the NoSchedule taint (value: the namespace) on every Node
// registered for a KwokMachine (contract.TenantTaint).
func TenantTaint(ns string) corev1.Taint { return contract.TenantTaint(ns) }

func owner(km *infrastructurev1alpha1.KwokMachine) string { return km.Namespace + "/" + km.Name }

// Reconcile drives one KwokMachine.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	km := &infrastructurev1alpha1.KwokMachine{}
	if err := r.Get(ctx, req.NamespacedName, km); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !km.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, km)
	}
	// A providerID that is not this object's own (written around the
	// webhook) is never used: no Node is registered under it.
	if km.Spec.ProviderID != "" && km.Spec.ProviderID != machinespec.KwokProviderID(km) {
		patcher := creconcile.NewStatusPatcher(r.Client, km)
		km.Status.Provisioned = false
		setReady(km, metav1.ConditionFalse, infrastructurev1alpha1.ProviderIDNotOwnReason,
			fmt.Sprintf("spec.providerID %q is not this KwokMachine's own (%s); it is written by the provider only: delete and recreate the KwokMachine without it", km.Spec.ProviderID, machinespec.KwokProviderID(km)))
		// Only a person can help (the field is immutable): Stalled, with
		// this generation observed, so that kstatus reads it Failed and
		// not InProgress for ever.
		ready := meta.FindStatusCondition(km.Status.Conditions, infrastructurev1alpha1.ReadyCondition)
		creconcile.MarkTrue(&km.Status.Conditions, km.Generation, creconcile.StalledCondition, ready.Reason, ready.Message)
		km.Status.ObservedGeneration = km.Generation
		return ctrl.Result{}, client.IgnoreNotFound(patcher.Patch(ctx, km))
	}
	// The finalizer and the providerID in one write, before the Node.
	if !controllerutil.ContainsFinalizer(km, infrastructurev1alpha1.KwokMachineFinalizer) || km.Spec.ProviderID == "" {
		_, err := creconcile.EnsureFinalizerWith(ctx, r.Client, km, infrastructurev1alpha1.KwokMachineFinalizer, func() {
			if km.Spec.ProviderID == "" {
				km.Spec.ProviderID = machinespec.KwokProviderID(km)
			}
		})
		return ctrl.Result{}, err
	}
	patcher := creconcile.NewStatusPatcher(r.Client, km)
	err := r.reconcileNode(ctx, km)
	if err == nil {
		km.Status.ObservedGeneration = km.Generation
	}
	creconcile.Remove(&km.Status.Conditions, creconcile.StalledCondition)
	return ctrl.Result{}, errors.Join(err, client.IgnoreNotFound(patcher.Patch(ctx, km)))
}

func setReady(km *infrastructurev1alpha1.KwokMachine, status metav1.ConditionStatus, reason, msg string) {
	creconcile.SetCondition(&km.Status.Conditions, km.Generation, infrastructurev1alpha1.ReadyCondition, status, reason, msg)
}

func wantOn(km *infrastructurev1alpha1.KwokMachine) bool {
	return km.Spec.PowerState != machinev1alpha1.PowerOff
}

// reconcileNode registers the Node and converges its power state, then
// records what it observed.
func (r *Reconciler) reconcileNode(ctx context.Context, km *infrastructurev1alpha1.KwokMachine) error {
	name := NodeName(km)
	node := &corev1.Node{}
	err := r.Get(ctx, types.NamespacedName{Name: name}, node)
	switch {
	case apierrors.IsNotFound(err):
		node = newNode(km, name, r.machineVersion(ctx, km))
		if err := r.Create(ctx, node, client.FieldOwner(FieldManager)); err != nil {
			return fmt.Errorf("registering Node %s: %w", name, err)
		}
	case err != nil:
		return fmt.Errorf("reading Node %s: %w", name, err)
	case node.Annotations[OwnerAnnotation] != owner(km) || node.Spec.ProviderID != km.Spec.ProviderID ||
		node.Annotations[contract.NodeOwnerAnnotation] != contract.NodeOwner(km):
		km.Status.Provisioned = false
		setReady(km, metav1.ConditionFalse, infrastructurev1alpha1.NodeConflictReason,
			fmt.Sprintf("Node %s exists and was not registered for this KwokMachine; it is never adopted", name))
		return nil
	default:
		if err := r.power(ctx, km, node); err != nil {
			return err
		}
		if err := r.firstImage(ctx, km, node); err != nil {
			return err
		}
	}
	observe(km, node)
	return nil
}

func newNode(km *infrastructurev1alpha1.KwokMachine, name, version string) *corev1.Node {
	ann := map[string]string{OwnerAnnotation: owner(km), contract.NodeOwnerAnnotation: contract.NodeOwner(km)}
	if wantOn(km) {
		ann[KwokNodeAnnotation] = "fake"
		booted(ann, km, version)
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: ann,
			Labels: map[string]string{
				"kubernetes.io/hostname": name,
				"kubernetes.io/os":       "linux",
				"kubernetes.io/arch":     "amd64",
				"type":                   "kwok",
				TenantLabel:              km.Namespace,
			},
		},
		Spec: corev1.NodeSpec{ProviderID: km.Spec.ProviderID, Taints: []corev1.Taint{TenantTaint(km.Namespace)}},
	}
}

// power hands the Node to kwok (On) or takes it back and marks it NotReady
// (Off).
func (r *Reconciler) power(ctx context.Context, km *infrastructurev1alpha1.KwokMachine, node *corev1.Node) error {
	_, managed := node.Annotations[KwokNodeAnnotation]
	on := wantOn(km)
	if on != managed {
		base := node.DeepCopy()
		if on {
			node.Annotations[KwokNodeAnnotation] = "fake"
			booted(node.Annotations, km, r.machineVersion(ctx, km))
		} else {
			delete(node.Annotations, KwokNodeAnnotation)
		}
		if err := r.Patch(ctx, node, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
			return fmt.Errorf("powering Node %s %s: %w", node.Name, km.Spec.PowerState, err)
		}
	}
	if !on && nodeReady(node) != corev1.ConditionFalse {
		// kwok no longer heartbeats it; say so at once rather than waiting
		// for the node-lifecycle controller's grace period.
		base := node.DeepCopy()
		now := metav1.Now()
		setNodeCondition(node, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: nodePoweredOffReason,
			Message: "the KwokMachine is powered off", LastHeartbeatTime: now, LastTransitionTime: now})
		//nolint:forbidigo // a Node, not a kind of ours: kwok heartbeats its status, so this one condition is written unlocked rather than retried against each heartbeat
		if err := r.Status().Patch(ctx, node, client.MergeFrom(base)); err != nil {
			return fmt.Errorf("marking Node %s NotReady: %w", node.Name, err)
		}
	}
	return nil
}

// booted records, on a Node whose machine boots (registration, or power
// on), the image it boots and the version of its Machine, as a kubelet
// reports status.nodeInfo at its start: they change only at the next boot,
// so the upgrade controller reads them to know what a machine came back
// with.
func booted(ann map[string]string, km *infrastructurev1alpha1.KwokMachine, version string) {
	ann[upgradev1alpha1.BootedImageAnnotation] = km.Spec.Image
	ann[upgradev1alpha1.BootedVersionAnnotation] = version
}

// firstImage records the image and version of a running Node that was
// registered before its Machine gave the KwokMachine an image (a
// KwokMachine is often created before its Machine): it is taken to have
// booted the first image it is given. Later images need a boot.
func (r *Reconciler) firstImage(ctx context.Context, km *infrastructurev1alpha1.KwokMachine, node *corev1.Node) error {
	if km.Spec.Image == "" || node.Annotations[upgradev1alpha1.BootedImageAnnotation] != "" || node.Annotations[KwokNodeAnnotation] == "" {
		return nil
	}
	base := node.DeepCopy()
	booted(node.Annotations, km, r.machineVersion(ctx, km))
	if err := r.Patch(ctx, node, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldManager)); err != nil {
		return fmt.Errorf("recording the image of Node %s: %w", node.Name, err)
	}
	return nil
}

// machineVersion is the spec.version of the Machine that controls km, or
// "" when there is none (a KwokMachine on its own has no version).
func (r *Reconciler) machineVersion(ctx context.Context, km *infrastructurev1alpha1.KwokMachine) string {
	ref := metav1.GetControllerOf(km)
	if ref == nil || ref.Kind != "Machine" || ref.APIVersion != machinev1alpha1.GroupVersion.String() {
		return ""
	}
	m := &machinev1alpha1.Machine{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: km.Namespace, Name: ref.Name}, m); err != nil || m.UID != ref.UID {
		return ""
	}
	return m.Spec.Version
}

func setNodeCondition(n *corev1.Node, c corev1.NodeCondition) {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == c.Type {
			n.Status.Conditions[i] = c
			return
		}
	}
	n.Status.Conditions = append(n.Status.Conditions, c)
}

func nodeReady(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}

// observe records the contract status from the Node.
func observe(km *infrastructurev1alpha1.KwokMachine, node *corev1.Node) {
	km.Status.Provisioned = true
	km.Status.NodeName = node.Name
	km.Status.BootDevice = km.Spec.BootDevice
	if km.Status.BootDevice == "" {
		km.Status.BootDevice = machinev1alpha1.BootDisk
	}
	km.Status.Addresses = nil
	for _, a := range node.Status.Addresses {
		km.Status.Addresses = append(km.Status.Addresses, machinev1alpha1.MachineAddress{Type: string(a.Type), Address: a.Address})
	}
	_, managed := node.Annotations[KwokNodeAnnotation]
	ready := nodeReady(node) == corev1.ConditionTrue
	switch {
	case wantOn(km) && managed && ready:
		km.Status.PowerState = machinev1alpha1.PowerOn
		setReady(km, metav1.ConditionTrue, infrastructurev1alpha1.PoweredOnReason, "Node "+node.Name+" is Ready")
	case !wantOn(km) && !managed && !ready:
		km.Status.PowerState = machinev1alpha1.PowerOff
		setReady(km, metav1.ConditionTrue, infrastructurev1alpha1.PoweredOffReason, "Node "+node.Name+" is powered off")
	default:
		if managed && ready {
			km.Status.PowerState = machinev1alpha1.PowerOn
		} else {
			km.Status.PowerState = machinev1alpha1.PowerOff
		}
		want := "On"
		if !wantOn(km) {
			want = "Off"
		}
		setReady(km, metav1.ConditionFalse, infrastructurev1alpha1.PoweringReason, "powering "+want)
	}
}

func (r *Reconciler) reconcileDelete(ctx context.Context, km *infrastructurev1alpha1.KwokMachine) error {
	if !controllerutil.ContainsFinalizer(km, infrastructurev1alpha1.KwokMachineFinalizer) {
		return nil
	}
	node := &corev1.Node{}
	err := r.Get(ctx, types.NamespacedName{Name: NodeName(km)}, node)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err == nil && node.Annotations[OwnerAnnotation] == owner(km) && node.Annotations[contract.NodeOwnerAnnotation] == contract.NodeOwner(km) {
		if node.DeletionTimestamp.IsZero() {
			if err := r.Delete(ctx, node, client.Preconditions{UID: &node.UID}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting Node %s: %w", node.Name, err)
			}
		}
		return nil // the Node's deletion event brings us back
	}
	return creconcile.RemoveFinalizer(ctx, r.Client, km, infrastructurev1alpha1.KwokMachineFinalizer)
}
