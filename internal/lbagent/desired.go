package lbagent

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1alpha1 "github.com/converge-dev/converge/api/lb/v1alpha1"
	"github.com/converge-dev/converge/internal/lbdataplane"
	"github.com/converge-dev/converge/internal/lbipam"
)

// vipState is what this node should do for one address.
type vipState struct {
	ip        netip.Addr
	iface     string
	services  []*corev1.Service
	dataplane []lbdataplane.Service
	// notHere: an externalTrafficPolicy Local Service on this address has
	// ready endpoints, none of them on this node.
	notHere bool
}

// desired reads the caches and returns every address this node is
// eligible to announce, with its Services and ready endpoints.
func (a *agent) desired(ctx context.Context) (map[netip.Addr]*vipState, error) {
	var pools lbv1alpha1.IPAddressPoolList
	if err := a.cache.List(ctx, &pools); err != nil {
		return nil, err
	}
	var advs lbv1alpha1.L2AdvertisementList
	if err := a.cache.List(ctx, &advs); err != nil {
		return nil, err
	}
	node := &corev1.Node{}
	if err := a.cache.Get(ctx, client.ObjectKey{Name: a.cfg.NodeName}, node); err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	out := map[netip.Addr]*vipState{}
	for i := range pools.Items {
		p := &pools.Items[i]
		iface, ok := advertised(p.Name, node.Labels, advs.Items, a.cfg.Interface)
		if !ok {
			continue
		}
		for _, as := range p.Status.Assignments {
			ip, err := netip.ParseAddr(as.Address)
			if err != nil {
				continue
			}
			svc := &corev1.Service{}
			if err := a.cache.Get(ctx, client.ObjectKey{Namespace: as.Service.Namespace, Name: as.Service.Name}, svc); err != nil {
				if apierrors.IsNotFound(err) {
					continue
				}
				return nil, err
			}
			if svc.UID != as.Service.UID || !lbipam.Wants(svc, a.cfg.DefaultClass) {
				continue
			}
			dp, elsewhere, err := a.dataplaneService(ctx, svc, ip)
			if err != nil {
				return nil, err
			}
			st := out[ip]
			if st == nil {
				st = &vipState{ip: ip, iface: iface}
				out[ip] = st
			}
			st.services = append(st.services, svc)
			st.dataplane = append(st.dataplane, dp)
			if elsewhere {
				st.notHere = true
			}
		}
	}
	// An externalTrafficPolicy Local Service whose ready endpoints are all
	// on other nodes makes its address ineligible here: announcing it would
	// draw traffic this node cannot deliver without masquerading.
	for ip, st := range out {
		if st.notHere {
			delete(out, ip)
		}
	}
	return out, nil
}

// advertised reports whether an L2Advertisement announces the pool from a
// node with these labels, and on which interface.
func advertised(pool string, nodeLabels map[string]string, advs []lbv1alpha1.L2Advertisement, def string) (string, bool) {
	for _, adv := range advs {
		if len(adv.Spec.IPAddressPools) > 0 && !slices.Contains(adv.Spec.IPAddressPools, pool) {
			continue
		}
		if len(adv.Spec.NodeSelectors) > 0 {
			match := false
			for i := range adv.Spec.NodeSelectors {
				s, err := metav1.LabelSelectorAsSelector(&adv.Spec.NodeSelectors[i])
				if err == nil && s.Matches(labels.Set(nodeLabels)) {
					match = true
				}
			}
			if !match {
				continue
			}
		}
		if len(adv.Spec.Interfaces) > 0 {
			return adv.Spec.Interfaces[0], true
		}
		return def, true
	}
	return "", false
}

// dataplaneService maps a Service's ports to its ready, non-terminating
// endpoints. Terminating endpoints get no new connections; their existing
// ones keep flowing through conntrack until they close (drain) while the
// endpoint still serves (Draining).
//
// With externalTrafficPolicy Local only the endpoints whose nodeName is
// this node are used, and elsewhere reports that the Service has ready
// endpoints on other nodes but none here (the address is then not this
// node's to announce). A Local Service whose ready endpoints name no node
// at all is served like one without endpoints (NoReadyEndpoints).
func (a *agent) dataplaneService(ctx context.Context, svc *corev1.Service, ip netip.Addr) (_ lbdataplane.Service, elsewhere bool, _ error) {
	var sliceList discoveryv1.EndpointSliceList
	if err := a.cache.List(ctx, &sliceList, client.InNamespace(svc.Namespace),
		client.MatchingLabels{discoveryv1.LabelServiceName: svc.Name}); err != nil {
		return lbdataplane.Service{}, false, err
	}
	local := svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
	out := lbdataplane.Service{Name: svc.Namespace + "/" + svc.Name, VIP: ip, Local: local,
		ClientIPAffinity: svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP}
	readyHere, readyOnNodes := false, false
	for _, sp := range svc.Spec.Ports {
		proto := ""
		switch sp.Protocol {
		case corev1.ProtocolTCP, "":
			proto = "tcp"
		case corev1.ProtocolUDP:
			proto = "udp"
		default:
			continue // SCTP is not served
		}
		port := lbdataplane.Port{Protocol: proto, Port: uint16(sp.Port)} //nolint:gosec // 1..65535 by validation
		seen := map[netip.AddrPort]bool{}
		for _, es := range sliceList.Items {
			if es.AddressType != discoveryv1.AddressTypeIPv4 {
				continue
			}
			target := int32(0)
			for _, ep := range es.Ports {
				if ep.Port != nil && ptr.Deref(ep.Name, "") == sp.Name && (ep.Protocol == nil || *ep.Protocol == sp.Protocol) {
					target = *ep.Port
				}
			}
			if target == 0 {
				continue
			}
			for _, e := range es.Endpoints {
				terminating := ptr.Deref(e.Conditions.Terminating, false)
				// A terminating endpoint that still serves drains: no new
				// connections, its existing ones kept.
				draining := terminating && ptr.Deref(e.Conditions.Serving, true)
				if !draining && (!ptr.Deref(e.Conditions.Ready, true) || terminating) {
					continue
				}
				if local {
					node := ptr.Deref(e.NodeName, "")
					if node != a.cfg.NodeName {
						readyOnNodes = readyOnNodes || (node != "" && !draining)
						continue
					}
					readyHere = readyHere || !draining
				}
				for _, s := range e.Addresses {
					addr, err := netip.ParseAddr(s)
					if err != nil {
						continue
					}
					ap := netip.AddrPortFrom(addr, uint16(target))
					if seen[ap] {
						continue
					}
					seen[ap] = true
					if draining {
						port.Draining = append(port.Draining, ap)
					} else {
						port.Endpoints = append(port.Endpoints, ap)
					}
				}
			}
		}
		out.Ports = append(out.Ports, port)
	}
	return out, local && readyOnNodes && !readyHere, nil
}

// leaseName is the Lease of one address.
func leaseName(ip netip.Addr) string {
	b := ip.As4()
	return fmt.Sprintf("lb-vip-%d-%d-%d-%d", b[0], b[1], b[2], b[3])
}

// heartbeatName is the Lease an agent renews.
func heartbeatName(node string) string { return "lb-agent-" + node }
