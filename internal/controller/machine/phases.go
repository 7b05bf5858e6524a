package machine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	machinespec "github.com/converge-dev/converge/internal/machine/spec"
	pcontract "github.com/converge-dev/converge/pkg/contract"
	contract "github.com/converge-dev/converge/pkg/contract/infrastructuremachine"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

// scope holds what one reconcile read and observed; status.go turns it into
// conditions.
type scope struct {
	m     *machinev1alpha1.Machine
	infra *unstructured.Unstructured
	// blocked is the reason and message of a problem that stops the Machine
	// from being driven (unknown kind, not found, owned by another, ...).
	blockedReason, blockedMessage string
	// failed marks blockedReason as one only a person can fix.
	failed bool
	// duplicateMAC is set when a NIC's MAC is taken.
	duplicateMAC string
	infraStatus  *contract.Status
	node         *corev1.Node
	// gone is set once the finalizer is removed: no status is written.
	gone bool
}

// Reconcile drives one Machine.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	m := &machinev1alpha1.Machine{}
	if err := r.Get(ctx, req.NamespacedName, m); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if m.DeletionTimestamp.IsZero() {
		if added, err := creconcile.EnsureFinalizer(ctx, r.Client, m, machinev1alpha1.MachineFinalizer); err != nil || added {
			return ctrl.Result{}, err
		}
	}
	patcher := creconcile.NewStatusPatcher(r.Client, m)
	s := &scope{m: m}
	var res ctrl.Result
	defer func() {
		if s.gone {
			return
		}
		retErr = errors.Join(retErr, client.IgnoreNotFound(patcher.Patch(ctx, m)))
	}()
	if !m.DeletionTimestamp.IsZero() {
		res, retErr = r.reconcileDelete(ctx, s)
		return res, retErr
	}
	res, retErr = r.reconcileNormal(ctx, s)
	setStatus(s, retErr == nil)
	return res, retErr
}

func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) (ctrl.Result, error) {
	if err := r.getInfrastructure(ctx, s); err != nil || s.infra == nil {
		return requeueWhileBlocked(s), err
	}
	if s.m.Spec.Paused {
		s.blockedReason, s.blockedMessage = machinev1alpha1.PausedReason, "spec.paused is set: the provider object is not changed"
		r.observe(ctx, s)
		return ctrl.Result{}, nil
	}
	if err := r.checkMACs(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.driveInfrastructure(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	r.observe(ctx, s)
	return ctrl.Result{}, nil
}

func requeueWhileBlocked(s *scope) ctrl.Result {
	if s.blockedReason != "" {
		// The provider object or its CRD may appear later; a watch on an
		// unknown kind cannot be opened, so poll.
		return ctrl.Result{RequeueAfter: 30 * time.Second}
	}
	return ctrl.Result{}
}

// getInfrastructure reads the provider object into s.infra, or records why
// it cannot be used.
func (r *Reconciler) getInfrastructure(ctx context.Context, s *scope) error {
	ref := s.m.Spec.InfrastructureRef
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		s.blockedReason, s.blockedMessage, s.failed = machinev1alpha1.InfrastructureContractNotDeclaredReason,
			fmt.Sprintf("spec.infrastructureRef.apiVersion %q: %v", ref.APIVersion, err), true
		return nil
	}
	gvk := gv.WithKind(ref.Kind)
	// The kind must declare the contract (a labelled, namespaced CRD)
	// before anything of it is read or watched: a core kind (Node, Secret)
	// or another foreign kind would otherwise be cached cluster-wide,
	// patched and deleted on the tenant's word.
	if err := r.Contracts.Check(ctx, gvk, pcontract.InfrastructureMachine); err != nil {
		if pcontract.IsNotDeclared(err) {
			s.blockedReason, s.blockedMessage, s.failed = machinev1alpha1.InfrastructureContractNotDeclaredReason,
				"spec.infrastructureRef.kind: "+err.Error()+"; nothing of it is read, watched, changed or deleted", true
			return nil
		}
		return fmt.Errorf("checking the contract of %s: %w", gvk, err)
	}
	if err := r.providers.Watch(gvk); err != nil {
		return err
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	// The namespace is always the Machine's: the reference has no namespace
	// field, and a name is never resolved elsewhere.
	if err := r.Get(ctx, types.NamespacedName{Namespace: s.m.Namespace, Name: ref.Name}, u); err != nil {
		if apierrors.IsNotFound(err) {
			s.blockedReason, s.blockedMessage = machinev1alpha1.InfrastructureNotFoundReason,
				fmt.Sprintf("%s %s/%s does not exist", ref.Kind, s.m.Namespace, ref.Name)
			return nil
		}
		return fmt.Errorf("reading %s %s: %w", ref.Kind, ref.Name, err)
	}
	if owner := metav1.GetControllerOf(u); owner != nil && owner.UID != s.m.UID {
		s.blockedReason, s.blockedMessage, s.failed = machinev1alpha1.InfrastructureOwnedByOtherReason,
			fmt.Sprintf("%s %s is controlled by %s %s; it is never taken over", ref.Kind, ref.Name, owner.Kind, owner.Name), true
		return nil
	}
	s.infra = u
	return nil
}

// checkMACs records a MAC this Machine shares with an older Machine (any
// namespace: a MAC is unique on the wire). The older one keeps it.
func (r *Reconciler) checkMACs(ctx context.Context, s *scope) error {
	for _, nic := range machinespec.EffectiveNICs(s.m) {
		list := &machinev1alpha1.MachineList{}
		if err := r.List(ctx, list, client.MatchingFields{macIndex: nic.MACAddress}); err != nil {
			return fmt.Errorf("listing Machines by MAC: %w", err)
		}
		for i := range list.Items {
			o := &list.Items[i]
			if o.UID == s.m.UID || !older(o, s.m) {
				continue
			}
			who := "another Machine"
			if o.Namespace == s.m.Namespace {
				who = "Machine " + o.Name // never name another tenant's Machine
			}
			s.duplicateMAC = fmt.Sprintf("networkInterfaces %s: MAC %s is already used by %s; the provider keeps its NICs until this is fixed", nic.Name, nic.MACAddress, who)
			return nil
		}
	}
	return nil
}

func older(a, b *machinev1alpha1.Machine) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.UID < b.UID
}

// desired is what the Machine asks of its provider.
func desired(s *scope) contract.Desired {
	d := contract.Desired{
		PowerState: string(s.m.EffectivePowerState()),
		BootDevice: string(s.m.EffectiveBootDevice()),
		BootOnce:   s.m.Spec.BootOnce,
		Image:      s.m.Spec.Image,
	}
	if s.duplicateMAC == "" {
		d.NetworkInterfaces = []contract.NetworkInterface{}
		for _, n := range machinespec.EffectiveNICs(s.m) {
			d.NetworkInterfaces = append(d.NetworkInterfaces, contract.NetworkInterface{Name: n.Name, Network: n.Network, MACAddress: n.MACAddress})
		}
	}
	return d
}

// driveInfrastructure takes controller ownership of the provider object and
// writes the contract's spec fields, in one optimistic-locked merge patch
// and only when something differs.
func (r *Reconciler) driveInfrastructure(ctx context.Context, s *scope) error {
	d := desired(s)
	owned := metav1.IsControlledBy(s.infra, s.m)
	if owned && contract.SpecMatches(s.infra, d) {
		return nil
	}
	patch := contract.SpecPatch(d)
	md := map[string]any{"resourceVersion": s.infra.GetResourceVersion()}
	if !owned {
		refs := slices.Clone(s.infra.GetOwnerReferences())
		refs = append(refs, *metav1.NewControllerRef(s.m, machinev1alpha1.GroupVersion.WithKind("Machine")))
		md["ownerReferences"] = refs
	}
	patch["metadata"] = md
	raw, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	if err := r.Patch(ctx, s.infra, client.RawPatch(types.MergePatchType, raw), client.FieldOwner(FieldManager)); err != nil {
		return fmt.Errorf("writing %s %s: %w", s.infra.GetKind(), s.infra.GetName(), err)
	}
	return nil
}

// observe reads the provider's contract status and the matching Node.
func (r *Reconciler) observe(ctx context.Context, s *scope) {
	st, err := contract.Read(s.infra)
	if err != nil {
		s.blockedReason, s.blockedMessage, s.failed = machinev1alpha1.ContractViolationReason, err.Error(), true
		return
	}
	s.infraStatus = &st
	if st.ProviderID == "" {
		return
	}
	nodes := &corev1.NodeList{}
	if err := r.List(ctx, nodes, client.MatchingFields{nodeProviderIDIndex: st.ProviderID}); err != nil {
		return
	}
	// Only a Node the provider registered for this very object is the
	// Machine's: spec.providerID is a value a tenant may write, the
	// annotation (on a Node, which tenants cannot write) is not.
	owner := contract.NodeOwner(s.infra)
	for i := range nodes.Items {
		if nodes.Items[i].Annotations[contract.NodeOwnerAnnotation] == owner {
			s.node = &nodes.Items[i]
			return
		}
	}
}
