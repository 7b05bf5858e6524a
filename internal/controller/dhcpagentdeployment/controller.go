// Package dhcpagentdeployment runs Converge's DHCP agent in cluster mode:
// for every distinct spec.networkName among IPPools it keeps one
// Deployment (1 replica, strategy Recreate) running `converge agent dhcp
// --network=NAME` with the agents' ServiceAccount and a Multus attachment
// (the k8s.v1.cni.cncf.io/networks annotation) to that network, and
// deletes it when the network's last pool goes. It is enabled by the
// manager's --dhcp-agent-image; without it the in-manager agent
// (internal/controller/dhcpagent) serves, as in local mode.
//
// IPPools live in any namespace and a Deployment can only be owned by an
// object of its own namespace, so the Deployments are not owned by the
// pools: they carry NetworkLabel, the controller reconciles networks (not
// pools), and it deletes what carries the label of a network without pools.
package dhcpagentdeployment

import (
	"context"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dhcpv1alpha1 "github.com/converge-dev/converge/api/dhcp/v1alpha1"
)

// ControllerName is the name used with --controllers, in logs and metrics.
const ControllerName = "dhcp-agent-deployment"

// FieldManager is the field manager of the applied Deployments.
const FieldManager = "converge-dhcp-agent-deployment"

// Labels and annotations.
const (
	// NetworkLabel on a Deployment names the network its agent serves.
	NetworkLabel = "dhcp.converge.dev/agent-network"
	// ComponentLabel is app.kubernetes.io/component; its value on the
	// agents' Deployments and Pods is Component.
	ComponentLabel = "app.kubernetes.io/component"
	// Component is the value of ComponentLabel on the agents.
	Component = "dhcp-agent"
	// AttachmentAnnotation on an IPPool sets the network's attachment: the
	// value of the agent Pod's NetworksAnnotation (e.g.
	// "converge-system/lan@net1"). When pools of one network disagree, the
	// first by namespace/name wins.
	AttachmentAnnotation = "dhcp.converge.dev/agent-attachment"
	// NetworksAnnotation is Multus' attachment annotation.
	NetworksAnnotation = "k8s.v1.cni.cncf.io/networks"
	// NetworkPlaceholder in Reconciler.Attachment is replaced with the
	// network's name.
	NetworkPlaceholder = "{network}"
)

// DeploymentName is the name of network's agent Deployment.
func DeploymentName(network string) string { return "dhcp-agent-" + network }

// +kubebuilder:rbac:groups=dhcp.converge.dev,resources=ippools,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;patch;delete

// Reconciler keeps one agent Deployment per network.
type Reconciler struct {
	Client client.Client
	// Image is the converge image the agents run (--dhcp-agent-image).
	Image string
	// Namespace holds the Deployments and the agents' Leases.
	Namespace string
	// ServiceAccount is the agents' (bound to the dhcp-agent ClusterRole).
	ServiceAccount string
	// Attachment is the default NetworksAnnotation value, with
	// NetworkPlaceholder replaced by the network; AttachmentAnnotation on a
	// pool overrides it. Empty is NetworkPlaceholder: a
	// NetworkAttachmentDefinition named after the network in Namespace.
	Attachment string
	// Interface is the agent's --interface: the attachment's interface in
	// the Pod; empty is "net1" (Multus' name for the first).
	Interface string
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Client = mgr.GetClient()
	if r.Attachment == "" {
		r.Attachment = NetworkPlaceholder
	}
	if r.Interface == "" {
		r.Interface = "net1"
	}
	byPool := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		p, ok := o.(*dhcpv1alpha1.IPPool)
		if !ok {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: p.Spec.NetworkName}}}
	})
	byDeployment := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		n := o.GetLabels()[NetworkLabel]
		if n == "" || o.GetNamespace() != r.Namespace {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: n}}}
	})
	return ctrl.NewControllerManagedBy(mgr).Named(ControllerName).
		Watches(&dhcpv1alpha1.IPPool{}, byPool).
		Watches(&appsv1.Deployment{}, byDeployment).
		Complete(reconcile.Func(func(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
			return ctrl.Result{}, r.reconcileNetwork(ctx, req.Name)
		}))
}

// reconcileNetwork applies the network's Deployment while it has pools and
// deletes it once it has none.
func (r *Reconciler) reconcileNetwork(ctx context.Context, network string) error {
	var list dhcpv1alpha1.IPPoolList
	if err := r.Client.List(ctx, &list); err != nil {
		return fmt.Errorf("listing IPPools: %w", err)
	}
	var pools []*dhcpv1alpha1.IPPool
	for i := range list.Items {
		if list.Items[i].Spec.NetworkName == network && list.Items[i].DeletionTimestamp.IsZero() {
			pools = append(pools, &list.Items[i])
		}
	}
	if len(pools) == 0 {
		return r.deleteDeployment(ctx, network)
	}
	d := r.desired(network, r.attachment(network, pools))
	if err := r.Client.Apply(ctx, d, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying the DHCP agent Deployment of network %s: %w", network, err)
	}
	return nil
}

// attachment is the network's attachment: the first pool's annotation
// (by namespace/name), else the default.
func (r *Reconciler) attachment(network string, pools []*dhcpv1alpha1.IPPool) string {
	slices.SortFunc(pools, func(a, b *dhcpv1alpha1.IPPool) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	for _, p := range pools {
		if a := p.Annotations[AttachmentAnnotation]; a != "" {
			return a
		}
	}
	return strings.ReplaceAll(r.Attachment, NetworkPlaceholder, network)
}

// desired is the network's Deployment: one agent, Recreate (the old Pod
// releases the Lease before the new one starts), root with the network
// capabilities only.
func (r *Reconciler) desired(network, attachment string) *appsv1ac.DeploymentApplyConfiguration {
	labels := map[string]string{ComponentLabel: Component, NetworkLabel: network, "app.kubernetes.io/name": "converge"}
	args := []string{"agent", "dhcp", "--network=" + network, "--interface=" + r.Interface,
		"--lease-namespace=" + r.Namespace, "--log-format=json"}
	container := corev1ac.Container().WithName("agent").WithImage(r.Image).WithArgs(args...).
		WithSecurityContext(corev1ac.SecurityContext().
			WithRunAsUser(0).WithRunAsNonRoot(false).WithAllowPrivilegeEscalation(false).WithReadOnlyRootFilesystem(true).
			WithCapabilities(corev1ac.Capabilities().WithDrop("ALL").WithAdd("NET_ADMIN", "NET_RAW", "NET_BIND_SERVICE"))).
		WithResources(corev1ac.ResourceRequirements().WithRequests(corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")}))
	return appsv1ac.Deployment(DeploymentName(network), r.Namespace).WithLabels(labels).
		WithSpec(appsv1ac.DeploymentSpec().WithReplicas(1).
			WithStrategy(appsv1ac.DeploymentStrategy().WithType(appsv1.RecreateDeploymentStrategyType)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(map[string]string{ComponentLabel: Component, NetworkLabel: network})).
			WithTemplate(corev1ac.PodTemplateSpec().WithLabels(labels).
				WithAnnotations(map[string]string{NetworksAnnotation: attachment}).
				WithSpec(corev1ac.PodSpec().WithServiceAccountName(r.ServiceAccount).
					WithTerminationGracePeriodSeconds(10).WithContainers(container))))
}

// deleteDeployment deletes the network's Deployment if this controller
// made it (it carries NetworkLabel).
func (r *Reconciler) deleteDeployment(ctx context.Context, network string) error {
	d := &appsv1.Deployment{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: DeploymentName(network)}, d)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the DHCP agent Deployment of network %s: %w", network, err)
	}
	if d.Labels[NetworkLabel] != network || !d.DeletionTimestamp.IsZero() {
		return nil
	}
	err = r.Client.Delete(ctx, d, client.Preconditions{UID: &d.UID}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the DHCP agent Deployment of network %s: %w", network, err)
	}
	return nil
}
