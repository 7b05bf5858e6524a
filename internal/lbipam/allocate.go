package lbipam

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	lbv1alpha1 "github.com/converge-dev/converge/api/lb/v1alpha1"
)

// Request is what a Service asks for.
type Request struct {
	Namespace, Name string
	UID             types.UID
	// Ports are PROTOCOL/port strings.
	Ports []string
	// SharingKey is the allow-shared-ip annotation.
	SharingKey string
	// Address is the requested address (zero: any).
	Address netip.Addr
	// Pool is the requested pool ("": auto-assign pools).
	Pool string
	// NamespaceLabels and ServiceLabels are matched against grants.
	NamespaceLabels, ServiceLabels map[string]string
	// MaxAssignmentsPerPool is the most assignments a pool may hold; a
	// pool holding that many (not counting this Service's own) gives this
	// Service no address. 0: no bound.
	MaxAssignmentsPerPool int
}

// full reports whether the pool holds req.MaxAssignmentsPerPool
// assignments of other Services, so that one more would pass the bound.
func full(p *lbv1alpha1.IPAddressPool, req Request) bool {
	if req.MaxAssignmentsPerPool <= 0 {
		return false
	}
	n := 0
	for _, a := range p.Status.Assignments {
		if a.Service.UID != req.UID {
			n++
		}
	}
	return n >= req.MaxAssignmentsPerPool
}

// limitExceeded is the decision for a Service whose candidate pools are
// all at the assignment bound.
func limitExceeded(req Request, pools []string) Decision {
	what := "IPAddressPool " + pools[0] + " holds"
	if len(pools) > 1 {
		what = "IPAddressPools " + strings.Join(pools, ", ") + " each hold"
	}
	return Decision{Reason: lbv1alpha1.AssignmentLimitExceededReason,
		Message: fmt.Sprintf("%s %d assignments, the most the cluster admin allows per pool (--lb-max-assignments-per-pool); no address for this Service",
			what, req.MaxAssignmentsPerPool)}
}

// Pool is a parsed IPAddressPool.
type Pool struct {
	Obj    *lbv1alpha1.IPAddressPool
	Ranges []Range
}

// Decision is the outcome of Allocate: a pool and address, or a reason
// (one of the lbv1alpha1 *Reason constants) and a message.
type Decision struct {
	Pool    string
	Address netip.Addr
	Reason  string
	Message string
}

// OK reports whether an address was chosen.
func (d Decision) OK() bool { return d.Address.IsValid() }

// Wants reports whether Converge serves the Service: type LoadBalancer,
// not being deleted, and Converge's class (or no class when defaultClass).
func Wants(svc *corev1.Service, defaultClass bool) bool {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.DeletionTimestamp != nil {
		return false
	}
	if svc.Spec.LoadBalancerClass == nil {
		return defaultClass
	}
	return *svc.Spec.LoadBalancerClass == lbv1alpha1.LoadBalancerClass
}

// Grants reports whether the pool may serve a Service in a namespace with
// the given labels. A pool without serviceAllocation serves everyone.
func Grants(p *lbv1alpha1.IPAddressPool, ns string, nsLabels, svcLabels map[string]string) bool {
	sa := p.Spec.ServiceAllocation
	if sa == nil {
		return true
	}
	if len(sa.Namespaces) > 0 || len(sa.NamespaceSelectors) > 0 {
		if !slices.Contains(sa.Namespaces, ns) && !anyMatch(sa.NamespaceSelectors, nsLabels) {
			return false
		}
	}
	if len(sa.ServiceSelectors) > 0 && !anyMatch(sa.ServiceSelectors, svcLabels) {
		return false
	}
	return true
}

func anyMatch(sels []metav1.LabelSelector, l map[string]string) bool {
	for i := range sels {
		s, err := metav1.LabelSelectorAsSelector(&sels[i])
		if err == nil && s.Matches(labels.Set(l)) {
			return true
		}
	}
	return false
}

// CanShare reports whether req may use an address the holders already use:
// only Services of the same namespace with the same non-empty sharing key
// and no colliding port. A Service never collides with itself.
func CanShare(holders []lbv1alpha1.Assignment, req Request) bool {
	for _, h := range holders {
		if h.Service.Namespace == req.Namespace && h.Service.Name == req.Name {
			continue
		}
		if req.SharingKey == "" || h.SharingKey != req.SharingKey || h.Service.Namespace != req.Namespace {
			return false
		}
		for _, p := range req.Ports {
			if slices.Contains(h.Ports, p) {
				return false
			}
		}
	}
	return true
}

// holders indexes a pool's assignments by address.
func holders(p *lbv1alpha1.IPAddressPool) map[netip.Addr][]lbv1alpha1.Assignment {
	m := map[netip.Addr][]lbv1alpha1.Assignment{}
	for _, a := range p.Status.Assignments {
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			m[ip] = append(m[ip], a)
		}
	}
	return m
}

// SortPools orders pools for auto-assignment: priority, then name.
func SortPools(ps []Pool) {
	sort.SliceStable(ps, func(i, j int) bool {
		pi, pj := priority(ps[i].Obj), priority(ps[j].Obj)
		if pi != pj {
			return pi < pj
		}
		return ps[i].Obj.Name < ps[j].Obj.Name
	})
}

func priority(p *lbv1alpha1.IPAddressPool) int32 {
	if p.Spec.ServiceAllocation == nil {
		return 0
	}
	return p.Spec.ServiceAllocation.Priority
}

// Allocate chooses a pool and address for req among pools (sorted with
// SortPools). It is pure: the caller persists the choice in the pool's
// status with an optimistic lock and calls again on conflict.
func Allocate(req Request, pools []Pool) Decision {
	var candidates []Pool
	for _, p := range pools {
		if req.Pool != "" && p.Obj.Name != req.Pool {
			continue
		}
		if req.Pool == "" && !p.Obj.AutoAssigns() && !req.Address.IsValid() {
			continue
		}
		if !Grants(p.Obj, req.Namespace, req.NamespaceLabels, req.ServiceLabels) {
			continue
		}
		candidates = append(candidates, p)
	}
	if len(candidates) == 0 {
		if req.Pool != "" {
			return Decision{Reason: lbv1alpha1.PoolNotAllowedReason,
				Message: fmt.Sprintf("IPAddressPool %q does not exist or is not granted to namespace %q", req.Pool, req.Namespace)}
		}
		if req.Address.IsValid() {
			return Decision{Reason: lbv1alpha1.AddressUnavailableReason,
				Message: fmt.Sprintf("address %s is in no IPAddressPool granted to namespace %q", req.Address, req.Namespace)}
		}
		return Decision{Reason: lbv1alpha1.PoolExhaustedReason,
			Message: fmt.Sprintf("no auto-assign IPAddressPool is granted to namespace %q", req.Namespace)}
	}
	if req.Address.IsValid() {
		for _, p := range candidates {
			if !Usable(p.Ranges, p.Obj.Spec.AvoidBuggyIPs, req.Address) {
				continue
			}
			if !CanShare(holders(p.Obj)[req.Address], req) {
				return Decision{Reason: lbv1alpha1.AddressUnavailableReason,
					Message: fmt.Sprintf("address %s is in use by another Service that may not share it (sharing needs the same namespace, the same %s key and no colliding port)", req.Address, lbv1alpha1.AllowSharedIPAnnotation)}
			}
			if full(p.Obj, req) {
				return limitExceeded(req, []string{p.Obj.Name})
			}
			return Decision{Pool: p.Obj.Name, Address: req.Address}
		}
		return Decision{Reason: lbv1alpha1.AddressUnavailableReason,
			Message: fmt.Sprintf("address %s is in no IPAddressPool granted to namespace %q", req.Address, req.Namespace)}
	}
	var capped []string
	for _, p := range candidates {
		if full(p.Obj, req) {
			capped = append(capped, p.Obj.Name)
			continue // as if it had no free address: try the next pool
		}
		h := holders(p.Obj)
		// Share first: a Service with a sharing key joins its partners.
		if req.SharingKey != "" {
			for _, a := range p.Obj.Status.Assignments {
				ip, err := netip.ParseAddr(a.Address)
				if err == nil && a.SharingKey == req.SharingKey && a.Service.Namespace == req.Namespace && CanShare(h[ip], req) {
					return Decision{Pool: p.Obj.Name, Address: ip}
				}
			}
		}
		if ip, ok := First(p.Ranges, p.Obj.Spec.AvoidBuggyIPs, func(a netip.Addr) bool { return len(h[a]) == 0 }); ok {
			return Decision{Pool: p.Obj.Name, Address: ip}
		}
	}
	if len(capped) > 0 {
		return limitExceeded(req, capped)
	}
	return Decision{Reason: lbv1alpha1.PoolExhaustedReason,
		Message: fmt.Sprintf("every address of the pools granted to namespace %q is in use", req.Namespace)}
}

// Counts returns the distinct addresses in use and those still free.
func Counts(p Pool) (assigned int32, available int64) {
	seen := map[string]bool{}
	for _, a := range p.Obj.Status.Assignments {
		seen[a.Address] = true
	}
	assigned = int32(len(seen)) //nolint:gosec // bounded by MaxItems
	return assigned, Size(p.Ranges, p.Obj.Spec.AvoidBuggyIPs) - int64(assigned)
}
