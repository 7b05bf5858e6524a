package ippool

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	dhcpv1alpha1 "github.com/converge-dev/converge/api/dhcp/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	machinespec "github.com/converge-dev/converge/internal/machine/spec"
	"github.com/converge-dev/converge/internal/sharding"
)

// reconcileMachine keeps a MachineNetworkConfig of the Machine's name, owned
// by it, listing its NICs; it deletes it when the Machine has no NICs or is
// being deleted. A static ipAddress set by hand on the config is kept. A
// hand-made config of the same name (not controlled by the Machine) is left
// alone.
func (r *Reconciler) reconcileMachine(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	mach := &machinev1alpha1.Machine{}
	err := r.Client.Get(ctx, req.NamespacedName, mach)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	if apierrors.IsNotFound(err) {
		mach = nil
	}
	cur := &dhcpv1alpha1.MachineNetworkConfig{}
	if err := r.Client.Get(ctx, req.NamespacedName, cur); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		cur = nil
	}
	if cur != nil {
		owner := metav1.GetControllerOf(cur)
		if owner == nil || owner.Kind != "Machine" || (mach != nil && owner.UID != mach.UID) {
			return ctrl.Result{}, nil // not ours
		}
	}
	nics := []machinev1alpha1.NetworkInterface(nil)
	if mach != nil && mach.DeletionTimestamp.IsZero() {
		nics = machinespec.EffectiveNICs(mach)
	}
	if len(nics) == 0 {
		if cur != nil {
			if err := r.Client.Delete(ctx, cur, client.Preconditions{UID: &cur.UID}); client.IgnoreNotFound(err) != nil {
				return ctrl.Result{}, fmt.Errorf("deleting MachineNetworkConfig %s: %w", req, err)
			}
		}
		return ctrl.Result{}, nil
	}
	static := map[string]string{}
	if cur != nil {
		for _, nc := range cur.Spec.NetworkConfigs {
			static[nc.MACAddress] = nc.IPAddress
		}
	}
	var ncs []dhcpv1alpha1.NetworkConfig
	for _, n := range nics {
		if n.MACAddress == "" {
			continue
		}
		ncs = append(ncs, dhcpv1alpha1.NetworkConfig{NetworkName: n.Network, MACAddress: n.MACAddress, IPAddress: static[n.MACAddress]})
	}
	if cur == nil {
		m := &dhcpv1alpha1.MachineNetworkConfig{
			ObjectMeta: metav1.ObjectMeta{Name: mach.Name, Namespace: mach.Namespace},
			Spec:       dhcpv1alpha1.MachineNetworkConfigSpec{NetworkConfigs: ncs},
		}
		// The config is a sharded kind: it follows its Machine's shard.
		if k, ok := mach.Labels[sharding.Label]; ok {
			m.Labels = map[string]string{sharding.Label: k}
		}
		if err := controllerutil.SetControllerReference(mach, m, r.Client.Scheme()); err != nil {
			return ctrl.Result{}, err
		}
		if err := r.Client.Create(ctx, m, client.FieldOwner(FieldManager)); err != nil && !apierrors.IsAlreadyExists(err) {
			return ctrl.Result{}, fmt.Errorf("creating MachineNetworkConfig %s: %w", req, err)
		}
		return ctrl.Result{}, nil
	}
	if equality.Semantic.DeepEqual(cur.Spec.NetworkConfigs, ncs) {
		return ctrl.Result{}, nil
	}
	after := cur.DeepCopy()
	after.Spec.NetworkConfigs = ncs
	if err := r.Client.Patch(ctx, after, client.MergeFromWithOptions(cur, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldManager)); err != nil {
		return ctrl.Result{}, fmt.Errorf("updating MachineNetworkConfig %s: %w", req, err)
	}
	return ctrl.Result{}, nil
}
