package qemumachine

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	machinespec "github.com/converge-dev/converge/internal/machine/spec"
	contract "github.com/converge-dev/converge/pkg/contract/infrastructuremachine"
)

// The manager (in either mode) records which Node is a QemuMachine's; the
// machine agent never touches Nodes (it has no right to).
//
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch

// NodeName is the Node a QemuMachine's guest registers as (its kubelet's
// node name): qemu-<namespace>-<name>-<hash of namespace/name>
// (contract.NodeName), so that two namespaces never share one. Only a Node
// of this name whose spec.providerID is the QemuMachine's own is ever
// claimed for it.
func NodeName(qm *infrastructurev1alpha1.QemuMachine) string {
	return contract.NodeName("qemu", qm.Namespace, qm.Name)
}

// claimNode records that the Node the QemuMachine's guest registered is
// the QemuMachine's own, as KwokMachine does for the Nodes it registers:
// the Node named NodeName(qm) whose spec.providerID is machinespec.QemuProviderID(qm) gets
// the provider-object annotation (contract.NodeOwner) the Machine
// controller checks before it claims, drains or deletes a Node, and the
// tenant label and NoSchedule taint of the namespace.
//
// A Node found by spec.providerID alone is never claimed (a kubelet
// chooses its providerID; its node name is bound to its credentials), nor
// one of that name carrying another value, nor one already recorded for
// another object (a QemuMachine of the same name deleted and made again):
// it is never adopted.
func claimNode(ctx context.Context, c client.Client, qm *infrastructurev1alpha1.QemuMachine) error {
	own := machinespec.QemuProviderID(qm)
	if qm.Spec.ProviderID != own || !qm.DeletionTimestamp.IsZero() {
		return nil // a foreign providerID (stored around the webhook) claims nothing
	}
	node := &corev1.Node{}
	if err := c.Get(ctx, types.NamespacedName{Name: NodeName(qm)}, node); err != nil {
		return client.IgnoreNotFound(err)
	}
	if node.Spec.ProviderID != own {
		return nil
	}
	owner := contract.NodeOwner(qm)
	if cur, ok := node.Annotations[contract.NodeOwnerAnnotation]; ok && cur != owner {
		return nil // recorded for another object: never adopted
	}
	taint := contract.TenantTaint(qm.Namespace)
	if node.Annotations[contract.NodeOwnerAnnotation] == owner && node.Labels[contract.TenantLabel] == qm.Namespace &&
		slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.MatchTaint(&taint) && t.Value == taint.Value }) {
		return nil
	}
	base := node.DeepCopy()
	if node.Annotations == nil {
		node.Annotations = map[string]string{}
	}
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	node.Annotations[contract.NodeOwnerAnnotation] = owner
	node.Labels[contract.TenantLabel] = qm.Namespace
	node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.MatchTaint(&taint) })
	node.Spec.Taints = append(node.Spec.Taints, taint)
	// Locked: the annotation is checked and written in one step.
	if err := c.Patch(ctx, node, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("recording Node %s as QemuMachine %s/%s's: %w", node.Name, qm.Namespace, qm.Name, client.IgnoreNotFound(err))
	}
	return nil
}

// watchNodes makes a Node registered with a QemuMachine's providerID (and
// node name) bring that QemuMachine back, so its Node is claimed as soon as
// its guest registers it.
func watchNodes(b *builder.Builder) *builder.Builder {
	isQemu := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return strings.HasPrefix(o.(*corev1.Node).Spec.ProviderID, machinespec.QemuProviderIDPrefix)
	})
	return b.Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		ns, name, ok := strings.Cut(strings.TrimPrefix(o.(*corev1.Node).Spec.ProviderID, machinespec.QemuProviderIDPrefix), "/")
		if !ok || o.GetName() != contract.NodeName("qemu", ns, name) {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}}
	}), builder.WithPredicates(isQemu))
}
