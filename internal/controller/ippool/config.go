package ippool

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dhcpv1alpha1 "github.com/converge-dev/converge/api/dhcp/v1alpha1"
	"github.com/converge-dev/converge/internal/ippool"
	"github.com/converge-dev/converge/pkg/reconcile"
)

// nicResult is what one NIC's reconcile found.
type nicResult struct {
	status          dhcpv1alpha1.NetworkConfigStatus
	reason, message string
}

// reconcileConfig gives every NIC of a MachineNetworkConfig an address
// recorded in its pool, releases what it no longer needs, and reports.
func (r *Reconciler) reconcileConfig(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	m := &dhcpv1alpha1.MachineNetworkConfig{}
	if err := r.Client.Get(ctx, req.NamespacedName, m); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("MachineNetworkConfig", req.String()))
	pools, err := r.pools(ctx, m.Namespace)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !m.DeletionTimestamp.IsZero() {
		if err := r.release(ctx, m, pools, nil); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, reconcile.RemoveFinalizer(ctx, r.Client, m, dhcpv1alpha1.MachineNetworkConfigFinalizer)
	}
	if _, err := reconcile.EnsureFinalizer(ctx, r.Client, m, dhcpv1alpha1.MachineNetworkConfigFinalizer); err != nil {
		return ctrl.Result{}, err
	}
	patcher := reconcile.NewStatusPatcher(r.Client, m)
	var results []nicResult
	defer func() {
		configStatus(m, results, retErr == nil)
		retErr = errors.Join(retErr, patcher.Patch(ctx, m))
	}()
	keep := map[string]bool{} // pool/ip/mac kept
	for _, nc := range m.Spec.NetworkConfigs {
		res, err := r.reconcileNIC(ctx, m, nc, pools)
		if err != nil {
			return ctrl.Result{}, err
		}
		results = append(results, res)
		if res.status.AllocatedIPAddress != "" {
			keep[res.status.Pool+"/"+res.status.AllocatedIPAddress+"/"+nc.MACAddress] = true
		}
	}
	return ctrl.Result{}, r.release(ctx, m, pools, keep)
}

// choosePool picks the pool of the config's namespace serving nc's
// network: the one whose CIDR holds the static address, else the first by
// name.
func choosePool(nc dhcpv1alpha1.NetworkConfig, pools []parsedPool) *parsedPool {
	static, _ := netip.ParseAddr(nc.IPAddress)
	var first *parsedPool
	for i := range pools {
		if pools[i].obj.Spec.NetworkName != nc.NetworkName {
			continue
		}
		if first == nil {
			first = &pools[i]
		}
		if static.IsValid() && pools[i].p.CIDR.Contains(static) {
			return &pools[i]
		}
	}
	return first
}

// reconcileNIC makes sure nc holds an address in its pool.
func (r *Reconciler) reconcileNIC(ctx context.Context, m *dhcpv1alpha1.MachineNetworkConfig, nc dhcpv1alpha1.NetworkConfig, pools []parsedPool) (nicResult, error) {
	res := nicResult{status: dhcpv1alpha1.NetworkConfigStatus{MACAddress: nc.MACAddress, NetworkName: nc.NetworkName, State: dhcpv1alpha1.StatePending}}
	pp := choosePool(nc, pools)
	if pp == nil {
		res.reason, res.message = dhcpv1alpha1.PoolNotFoundReason,
			fmt.Sprintf("no IPPool in namespace %s serves network %q (NIC %s)", m.Namespace, nc.NetworkName, nc.MACAddress)
		return res, nil
	}
	pool := pp.obj.DeepCopy()
	res.status.Pool = pool.Name
	poolName := pool.Namespace + "/" + pool.Name
	rival, claimed, err := r.rival(ctx, m.Namespace, nc.NetworkName, nc.MACAddress)
	if err != nil {
		return res, err
	}
	var got dhcpv1alpha1.Allocation
	err = r.patchPool(ctx, pool, func(after *dhcpv1alpha1.IPPool, p *ippool.Pool) bool {
		got, res.reason, res.message = dhcpv1alpha1.Allocation{}, "", ""
		as := after.Status.IPv4.Allocated
		held := ippool.Held(as)
		cur, holds := ippool.Find(as, nc.MACAddress)
		// Another namespace claimed the MAC address on this network first
		// (or, in a race both won, earlier): never this one's. Its own
		// allocation, if any, is released below (not kept).
		if claimed && (!holds || rival.Before(ippool.Claim{Namespace: after.Namespace, Pool: after.Name, Allocation: cur})) {
			res.reason, res.message = dhcpv1alpha1.MACAddressClaimedReason,
				fmt.Sprintf("MAC address %s is already claimed on network %q by another namespace; a MAC address is served to one namespace per network (the first claim wins)", nc.MACAddress, nc.NetworkName)
			return false
		}
		var since *metav1.Time
		if holds {
			since = cur.ClaimedAt
			switch {
			case cur.Owner != m.Name || (cur.OwnerUID != "" && cur.OwnerUID != string(m.UID)):
				res.reason, res.message = dhcpv1alpha1.AddressUnavailableReason,
					fmt.Sprintf("MAC address %s already holds %s in IPPool %s for MachineNetworkConfig %s", nc.MACAddress, cur.IP, poolName, cur.Owner)
				return false
			case nc.IPAddress == "":
				got = cur
				return false
			case nc.IPAddress == cur.IP:
				// A stored static address the pool no longer allows (say,
				// excluded since) is released, not served.
				if why := p.StaticOK(netip.MustParseAddr(cur.IP)); why != "" {
					res.reason, res.message = dhcpv1alpha1.AddressUnavailableReason, fmt.Sprintf("ipAddress %s", why)
					return false
				}
				got = cur
				return false
			}
			// The static address changed: give the old one back first.
			as = slices.DeleteFunc(as, func(a dhcpv1alpha1.Allocation) bool { return a.MACAddress == nc.MACAddress })
			delete(held, netip.MustParseAddr(cur.IP))
		}
		if since == nil {
			since = &metav1.Time{Time: time.Now()}
		}
		var ip netip.Addr
		if nc.IPAddress != "" {
			ip, _ = netip.ParseAddr(nc.IPAddress)
			if why := p.StaticOK(ip); why != "" {
				res.reason, res.message = dhcpv1alpha1.AddressUnavailableReason, fmt.Sprintf("ipAddress %s", why)
				return false
			}
			if h, taken := held[ip]; taken {
				res.reason, res.message = dhcpv1alpha1.AddressUnavailableReason,
					fmt.Sprintf("ipAddress %s is allocated in IPPool %s to MAC address %s", ip, poolName, h.MACAddress)
				return false
			}
		} else {
			if after.Spec.Paused {
				res.reason, res.message = dhcpv1alpha1.PausedReason, fmt.Sprintf("IPPool %s is paused", poolName)
				return false
			}
			var ok bool
			if ip, ok = p.Next(held); !ok {
				res.reason, res.message = dhcpv1alpha1.PoolExhaustedReason, fmt.Sprintf("IPPool %s has no free address", poolName)
				return false
			}
		}
		got = dhcpv1alpha1.Allocation{IP: ip.String(), MACAddress: nc.MACAddress, Owner: m.Name, OwnerUID: string(m.UID), Static: nc.IPAddress != "", ClaimedAt: since}
		as = append(as, got)
		after.Status.IPv4.Allocated = as
		slices.SortFunc(after.Status.IPv4.Allocated, func(a, b dhcpv1alpha1.Allocation) int {
			return netip.MustParseAddr(a.IP).Compare(netip.MustParseAddr(b.IP))
		})
		return true
	})
	if err != nil {
		return res, err
	}
	if got.IP != "" {
		res.status.AllocatedIPAddress, res.status.State = got.IP, dhcpv1alpha1.StateAllocated
	} else if res.reason == dhcpv1alpha1.PoolExhaustedReason || res.reason == dhcpv1alpha1.AddressUnavailableReason || res.reason == dhcpv1alpha1.MACAddressClaimedReason {
		r.Recorder.Eventf(m, pool, corev1.EventTypeWarning, res.reason, "Allocate", "%s", res.message)
	}
	return res, nil
}

// release removes the config's allocations that keep does not hold (all
// when keep is nil), in every pool of its namespace.
func (r *Reconciler) release(ctx context.Context, m *dhcpv1alpha1.MachineNetworkConfig, pools []parsedPool, keep map[string]bool) error {
	mine := func(pool string, a dhcpv1alpha1.Allocation) bool {
		return a.Owner == m.Name && (a.OwnerUID == "" || a.OwnerUID == string(m.UID)) && !keep[pool+"/"+a.IP+"/"+a.MACAddress]
	}
	for _, pp := range pools {
		if !slices.ContainsFunc(pp.obj.Status.IPv4.Allocated, func(a dhcpv1alpha1.Allocation) bool { return mine(pp.obj.Name, a) }) {
			continue
		}
		pool := pp.obj.DeepCopy()
		if err := r.patchPool(ctx, pool, func(after *dhcpv1alpha1.IPPool, _ *ippool.Pool) bool {
			n := len(after.Status.IPv4.Allocated)
			after.Status.IPv4.Allocated = slices.DeleteFunc(after.Status.IPv4.Allocated, func(a dhcpv1alpha1.Allocation) bool { return mine(after.Name, a) })
			return len(after.Status.IPv4.Allocated) != n
		}); err != nil {
			return err
		}
	}
	return nil
}

// configStatus writes the NICs' states and Ready; pure.
func configStatus(m *dhcpv1alpha1.MachineNetworkConfig, results []nicResult, ok bool) {
	m.Status.NetworkConfigs = nil
	var reasons, msgs []string
	for _, res := range results {
		m.Status.NetworkConfigs = append(m.Status.NetworkConfigs, res.status)
		if res.reason != "" {
			reasons = append(reasons, res.reason)
			msgs = append(msgs, res.message)
		}
	}
	if !ok && len(results) < len(m.Spec.NetworkConfigs) {
		return // interrupted: keep Ready as it was, the retry reports
	}
	if ok {
		m.Status.ObservedGeneration = m.Generation
	}
	if len(reasons) == 0 {
		var ips []string
		for _, s := range m.Status.NetworkConfigs {
			ips = append(ips, s.AllocatedIPAddress)
		}
		reconcile.MarkTrue(&m.Status.Conditions, m.Generation, dhcpv1alpha1.ReadyCondition, dhcpv1alpha1.AllocatedReason,
			"allocated "+strings.Join(ips, ", "))
		return
	}
	reconcile.MarkFalse(&m.Status.Conditions, m.Generation, dhcpv1alpha1.ReadyCondition, reasons[0], strings.Join(msgs, "; "))
}
