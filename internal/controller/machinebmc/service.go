package machinebmc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	discoveryv1ac "k8s.io/client-go/applyconfigurations/discovery/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bmcv1alpha1 "github.com/converge-dev/converge/api/bmc/v1alpha1"
	"github.com/converge-dev/converge/internal/bmc"
)

// Expose says how a manager publishes its BMCs.
type Expose string

const (
	// ExposeLocal publishes the listeners' own addresses (the BMC
	// server's advertised address and its ports): `converge up`, a
	// manager whose BMC network is a namespace of the host.
	ExposeLocal Expose = "Local"
	// ExposeService publishes each MachineBMC through a Service of
	// spec.service.type in its namespace, without a selector, whose one
	// EndpointSlice names the leader's advertised address (its Pod IP)
	// and the BMC's ports. The new leader rewrites the EndpointSlice when
	// it starts the BMC, so clients keep the Service's address across a
	// failover.
	ExposeService Expose = "Service"
)

// Well-known ports of the published Services.
const (
	// IPMIPort is RMCP+'s port (UDP).
	IPMIPort = 623
	// RedfishPort is HTTPS's.
	RedfishPort = 443
)

// ManagedBy is the EndpointSlice managed-by label's value: the slices of
// BMC Services are Converge's, not the EndpointSlice controller's.
const ManagedBy = "bmc.converge.dev"

// ServiceName is the Service publishing the MachineBMC name: "bmc-<name>",
// or "bmc-" and a hash when that is not a DNS-1035 label.
func ServiceName(name string) string {
	n := "bmc-" + name
	if len(validation.IsDNS1035Label(n)) == 0 {
		return n
	}
	sum := sha256.Sum256([]byte(name))
	return "bmc-" + hex.EncodeToString(sum[:10])
}

// errServiceConflict: a Service of the name exists and is not this
// MachineBMC's; it is neither adopted nor changed.
type errServiceConflict struct{ name string }

func (e errServiceConflict) Error() string {
	return fmt.Sprintf("Service %s exists and is not this MachineBMC's: it is not adopted; delete or rename it", e.name)
}

// errServicePending: the Service has no address clients can use yet.
type errServicePending struct{ why string }

func (e errServicePending) Error() string { return e.why }

// publish makes ep reachable as the manager's Expose mode says and returns
// the endpoints clients use.
func (r *Reconciler) publish(ctx context.Context, b *bmcv1alpha1.MachineBMC, ep bmc.Endpoints) (bmc.Endpoints, error) {
	if r.Expose != ExposeService {
		return ep, nil
	}
	name := ServiceName(b.Name)
	cur := &corev1.Service{}
	err := r.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: name}, cur)
	switch {
	case apierrors.IsNotFound(err): // created below
	case err != nil:
		return bmc.Endpoints{}, err
	case !metav1.IsControlledBy(cur, b):
		return bmc.Endpoints{}, errServiceConflict{name: name}
	}
	labels := map[string]string{}
	if len(validation.IsValidLabelValue(b.Name)) == 0 {
		labels[bmcv1alpha1.MachineBMCLabel] = b.Name
	}
	typ := corev1.ServiceType(b.Spec.Service.Type)
	if typ == "" {
		typ = corev1.ServiceTypeClusterIP
	}
	owner := metav1ac.OwnerReference().WithAPIVersion(bmcv1alpha1.GroupVersion.String()).WithKind("MachineBMC").
		WithName(b.Name).WithUID(b.UID).WithController(true).WithBlockOwnerDeletion(true)
	svcSpec := corev1ac.ServiceSpec().WithType(typ)
	slice := discoveryv1ac.EndpointSlice(name, b.Namespace).WithOwnerReferences(owner).WithLabels(labels).
		WithLabels(map[string]string{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: ManagedBy}).
		WithAddressType(discoveryv1.AddressTypeIPv4)
	var host string
	add := func(portName string, proto corev1.Protocol, port int32, endpoint string) error {
		h, p, err := net.SplitHostPort(endpoint)
		if err != nil {
			return fmt.Errorf("BMC endpoint %q: %w", endpoint, err)
		}
		target, err := strconv.ParseInt(p, 10, 32)
		if err != nil {
			return fmt.Errorf("BMC endpoint %q: %w", endpoint, err)
		}
		host = h
		svcSpec.WithPorts(corev1ac.ServicePort().WithName(portName).WithProtocol(proto).WithPort(port).WithTargetPort(intstr.FromInt32(int32(target))))
		slice.WithPorts(discoveryv1ac.EndpointPort().WithName(portName).WithProtocol(proto).WithPort(int32(target)))
		return nil
	}
	if ep.IPMI != "" {
		if err := add("ipmi", corev1.ProtocolUDP, IPMIPort, ep.IPMI); err != nil {
			return bmc.Endpoints{}, err
		}
	}
	if ep.Redfish != "" {
		if err := add("redfish", corev1.ProtocolTCP, RedfishPort, strings.TrimPrefix(ep.Redfish, "https://")); err != nil {
			return bmc.Endpoints{}, err
		}
	}
	if ip := net.ParseIP(host); ip == nil || ip.To4() == nil || ip.IsUnspecified() || ip.IsLoopback() {
		return bmc.Endpoints{}, errServicePending{why: fmt.Sprintf("the BMC server advertises %q, which a Service cannot point at: run the manager with --bmc-advertise-address (its Pod IP)", host)}
	}
	slice.WithEndpoints(discoveryv1ac.Endpoint().WithAddresses(host).WithConditions(discoveryv1ac.EndpointConditions().WithReady(true)))
	svcAC := corev1ac.Service(name, b.Namespace).WithOwnerReferences(owner).WithLabels(labels).WithSpec(svcSpec)
	// Server-side apply: the fields set here are the controller's; an
	// allocator's (clusterIP, nodePorts) and the load balancer's status
	// stay theirs.
	if err := r.Apply(ctx, svcAC, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return bmc.Endpoints{}, fmt.Errorf("applying Service %s: %w", name, err)
	}
	if err := r.Apply(ctx, slice, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return bmc.Endpoints{}, fmt.Errorf("applying EndpointSlice %s: %w", name, err)
	}
	// The apply configuration now holds the API server's answer: the
	// Service as stored (cluster IP, node ports, load-balancer status).
	svc := &corev1.Service{}
	raw, err := json.Marshal(svcAC)
	if err == nil {
		err = json.Unmarshal(raw, svc)
	}
	if err != nil {
		return bmc.Endpoints{}, fmt.Errorf("reading the applied Service %s: %w", name, err)
	}
	addr, err := r.serviceAddress(ctx, svc)
	if err != nil {
		return bmc.Endpoints{}, err
	}
	var out bmc.Endpoints
	for _, p := range svc.Spec.Ports {
		port := p.Port
		if typ == corev1.ServiceTypeNodePort {
			port = p.NodePort
		}
		hp := net.JoinHostPort(addr, strconv.Itoa(int(port)))
		switch p.Name {
		case "ipmi":
			out.IPMI = hp
		case "redfish":
			out.Redfish = "https://" + hp
		}
	}
	return out, nil
}

// serviceAddress is the address clients of svc (as applied) use: the
// load balancer's, a node's for a NodePort, else the cluster IP.
func (r *Reconciler) serviceAddress(ctx context.Context, svc *corev1.Service) (string, error) {
	switch svc.Spec.Type {
	case corev1.ServiceTypeLoadBalancer:
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if in.IP != "" {
				return in.IP, nil
			}
		}
		return "", errServicePending{why: fmt.Sprintf("Service %s has no load-balancer address yet", svc.Name)}
	case corev1.ServiceTypeNodePort:
		nodes := &corev1.NodeList{}
		if err := r.List(ctx, nodes); err != nil {
			return "", err
		}
		slices.SortFunc(nodes.Items, func(a, b corev1.Node) int { return strings.Compare(a.Name, b.Name) })
		for _, n := range nodes.Items {
			for _, a := range n.Status.Addresses {
				if a.Type == corev1.NodeInternalIP {
					return a.Address, nil
				}
			}
		}
		return "", errServicePending{why: fmt.Sprintf("Service %s is a NodePort and no Node has an InternalIP", svc.Name)}
	}
	if ip := svc.Spec.ClusterIP; ip != "" && ip != corev1.ClusterIPNone {
		return ip, nil
	}
	return "", errServicePending{why: fmt.Sprintf("Service %s has no cluster IP yet", svc.Name)}
}

// preferredPorts are the ports the BMC listened on before (the targets of
// its Service), so a new leader takes them again when they are free.
func (r *Reconciler) preferredPorts(ctx context.Context, b *bmcv1alpha1.MachineBMC) (ipmiPort, redfishPort int) {
	if r.Expose != ExposeService {
		return portOf(b.Status.IPMIEndpoint), portOf(b.Status.RedfishEndpoint)
	}
	svc := &corev1.Service{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: ServiceName(b.Name)}, svc); err != nil || !metav1.IsControlledBy(svc, b) {
		return 0, 0
	}
	for _, p := range svc.Spec.Ports {
		switch p.Name {
		case "ipmi":
			ipmiPort = p.TargetPort.IntValue()
		case "redfish":
			redfishPort = p.TargetPort.IntValue()
		}
	}
	return ipmiPort, redfishPort
}
