// Package lbipam assigns addresses to Services of type LoadBalancer from
// IPAddressPools. The assignment is written to the pool's status with an
// optimistic lock before anything else learns of it, so an address is never
// given to two Services — across racing reconciles, restarts and stale
// caches. The agent (internal/lbagent) announces the address and publishes
// status.loadBalancer.ingress only once it reached an endpoint through it.
package lbipam

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lbv1alpha1 "github.com/converge-dev/converge/api/lb/v1alpha1"
	"github.com/converge-dev/converge/internal/lbipam"
)

// ControllerName is the name used with --controllers, in logs and metrics.
const ControllerName = "loadbalancer-ipam"

// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=services/status,verbs=get;patch;update
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=lb.converge.dev,resources=ipaddresspools,verbs=get;list;watch
// +kubebuilder:rbac:groups=lb.converge.dev,resources=ipaddresspools/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconciler assigns and releases Service addresses.
type Reconciler struct {
	Client client.Client
	// APIReader reads past the cache before releasing an assignment.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// DefaultClass makes Converge serve LoadBalancer Services that set no
	// spec.loadBalancerClass.
	DefaultClass bool
	// MaxListenersPerNamespace bounds the listeners (ports of Services
	// holding an address, counted from the pools' assignments) of one
	// namespace, so a tenant cannot grow the agents' data plane without
	// bound; 0 is no bound.
	MaxListenersPerNamespace int
	// MaxAssignmentsPerPool bounds the assignments one pool's status holds
	// (Services sharing an address each add one), so tenants of many
	// granted namespaces together cannot grow a pool, and every
	// reconcile reading it, without bound; 0 is the schema's bound
	// (lbv1alpha1.MaxAssignments).
	MaxAssignmentsPerPool int
}

// Wants reports whether Converge serves the Service (see lbipam.Wants).
func Wants(svc *corev1.Service, defaultClass bool) bool { return lbipam.Wants(svc, defaultClass) }

// SetupWithManager registers the Service and pool controllers.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Client = mgr.GetClient()
	r.APIReader = mgr.GetAPIReader()
	r.Recorder = mgr.GetEventRecorder(ControllerName)
	// Any pool change can unblock a Service waiting for an address.
	allLBServices := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		var list corev1.ServiceList
		if err := r.Client.List(ctx, &list); err != nil {
			return nil
		}
		var out []reconcile.Request
		for i := range list.Items {
			if list.Items[i].Spec.Type == corev1.ServiceTypeLoadBalancer {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
			}
		}
		return out
	})
	if err := ctrl.NewControllerManagedBy(mgr).Named(ControllerName).
		For(&corev1.Service{}).
		Watches(&lbv1alpha1.IPAddressPool{}, allLBServices).
		Complete(r); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).Named(ControllerName + "-pool").
		For(&lbv1alpha1.IPAddressPool{}).
		Complete(reconcile.Func(r.reconcilePool))
}

// pools lists and parses the pools, sorted for auto-assignment.
func (r *Reconciler) pools(ctx context.Context) ([]lbipam.Pool, error) {
	var list lbv1alpha1.IPAddressPoolList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing IPAddressPools: %w", err)
	}
	out := make([]lbipam.Pool, 0, len(list.Items))
	for i := range list.Items {
		rs, err := lbipam.ParseAddresses(list.Items[i].Spec.Addresses)
		if err != nil {
			continue // refused at admission; never allocate from it
		}
		out = append(out, lbipam.Pool{Obj: &list.Items[i], Ranges: rs})
	}
	lbipam.SortPools(out)
	return out, nil
}

// held is one assignment of a Service found in a pool.
type held struct {
	pool *lbipam.Pool
	a    lbv1alpha1.Assignment
}

// Reconcile converges one Service's assignment.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	svc := &corev1.Service{}
	if err := r.Client.Get(ctx, req.NamespacedName, svc); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		svc = nil
	}
	pools, err := r.pools(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	var current []held
	for i := range pools {
		for _, a := range pools[i].Obj.Status.Assignments {
			if a.Service.Namespace == req.Namespace && a.Service.Name == req.Name {
				current = append(current, held{&pools[i], a})
			}
		}
	}
	if svc == nil || !Wants(svc, r.DefaultClass) {
		if err := r.release(ctx, current, ""); err != nil {
			return ctrl.Result{}, err
		}
		if svc != nil {
			return ctrl.Result{}, r.clearStatus(ctx, svc)
		}
		return ctrl.Result{}, nil
	}
	ns := &corev1.Namespace{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: svc.Namespace}, ns); err != nil {
		return ctrl.Result{}, fmt.Errorf("reading namespace %s: %w", svc.Namespace, err)
	}
	rq, badAddr := request(svc, ns.Labels)
	rq.MaxAssignmentsPerPool = r.MaxAssignmentsPerPool
	if rq.MaxAssignmentsPerPool <= 0 || rq.MaxAssignmentsPerPool > lbv1alpha1.MaxAssignments {
		rq.MaxAssignmentsPerPool = lbv1alpha1.MaxAssignments
	}
	if badAddr != "" {
		return ctrl.Result{}, r.setNotReady(ctx, svc, nil, lbv1alpha1.AddressUnavailableReason,
			fmt.Sprintf("annotation %s: %q is not an IPv4 address", lbv1alpha1.AddressAnnotation, badAddr))
	}
	if n := utf8.RuneCountInString(rq.SharingKey); n > lbv1alpha1.MaxSharingKeyLength {
		// Refused before any write: the pool's schema would refuse the
		// assignment, and every retry with it.
		msg := fmt.Sprintf("annotation %s: the sharing key is %d characters; an IPAddressPool records at most %d (status.assignments[].sharingKey), so the Service gets no address",
			lbv1alpha1.AllowSharedIPAnnotation, n, lbv1alpha1.MaxSharingKeyLength)
		r.Recorder.Eventf(svc, nil, corev1.EventTypeWarning, lbv1alpha1.SharingKeyTooLongReason, "Allocate", "%s", msg)
		if err := r.release(ctx, current, ""); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, r.setNotReady(ctx, svc, []corev1.LoadBalancerIngress{}, lbv1alpha1.SharingKeyTooLongReason, msg)
	}
	if len(rq.Ports) > lbv1alpha1.MaxAssignmentPorts {
		msg := fmt.Sprintf("the Service has %d ports; an IPAddressPool records at most %d per Service (status.assignments[].ports), so it gets no address",
			len(rq.Ports), lbv1alpha1.MaxAssignmentPorts)
		r.Recorder.Eventf(svc, nil, corev1.EventTypeWarning, lbv1alpha1.TooManyPortsReason, "Allocate", "%s", msg)
		if err := r.release(ctx, current, ""); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, r.setNotReady(ctx, svc, []corev1.LoadBalancerIngress{}, lbv1alpha1.TooManyPortsReason, msg)
	}
	if n := listeners(pools, rq); r.MaxListenersPerNamespace > 0 && n > r.MaxListenersPerNamespace {
		msg := fmt.Sprintf("namespace %s would have %d listeners (ports of LoadBalancer Services with an address) with this Service's %d; the cluster admin allows %d per namespace (--lb-max-listeners-per-namespace)",
			rq.Namespace, n, len(rq.Ports), r.MaxListenersPerNamespace)
		r.Recorder.Eventf(svc, nil, corev1.EventTypeWarning, lbv1alpha1.ListenerLimitExceededReason, "Allocate", "%s", msg)
		if err := r.release(ctx, current, ""); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, r.setNotReady(ctx, svc, []corev1.LoadBalancerIngress{}, lbv1alpha1.ListenerLimitExceededReason, msg)
	}
	// Keep a valid assignment; update its ports and key in place.
	for _, h := range current {
		if !valid(h, rq) {
			continue
		}
		if !slices.Equal(h.a.Ports, rq.Ports) || h.a.SharingKey != rq.SharingKey {
			if err := r.patchPool(ctx, h.pool.Obj, func(p *lbv1alpha1.IPAddressPool) {
				for i := range p.Status.Assignments {
					if p.Status.Assignments[i].Service.UID == rq.UID {
						p.Status.Assignments[i].Ports = rq.Ports
						p.Status.Assignments[i].SharingKey = rq.SharingKey
					}
				}
			}); err != nil {
				return ctrl.Result{}, err
			}
		}
		if err := r.release(ctx, current, h.pool.Obj.Name+"/"+h.a.Address); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, r.assigned(ctx, svc, h.a.Address)
	}
	d := lbipam.Allocate(rq, pools)
	if !d.OK() {
		r.Recorder.Eventf(svc, nil, corev1.EventTypeWarning, d.Reason, "Allocate", "%s", d.Message)
		if err := r.release(ctx, current, ""); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, r.setNotReady(ctx, svc, []corev1.LoadBalancerIngress{}, d.Reason, d.Message)
	}
	var pool *lbv1alpha1.IPAddressPool
	for i := range pools {
		if pools[i].Obj.Name == d.Pool {
			pool = pools[i].Obj
		}
	}
	// The write that makes the address this Service's. A conflict means
	// someone else changed the pool since our read: retry from scratch.
	if err := r.patchPool(ctx, pool, func(p *lbv1alpha1.IPAddressPool) {
		p.Status.Assignments = append(p.Status.Assignments, lbv1alpha1.Assignment{
			Address:    d.Address.String(),
			Service:    lbv1alpha1.ServiceRef{Namespace: rq.Namespace, Name: rq.Name, UID: rq.UID},
			SharingKey: rq.SharingKey,
			Ports:      rq.Ports,
		})
	}); err != nil {
		return ctrl.Result{}, err
	}
	r.Recorder.Eventf(svc, nil, corev1.EventTypeNormal, "AddressAssigned", "Allocate", "Assigned %s from IPAddressPool %s", d.Address, d.Pool)
	if err := r.release(ctx, current, d.Pool+"/"+d.Address.String()); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, r.assigned(ctx, svc, d.Address.String())
}

// request builds the allocation request of a Service; badAddr is set when
// the address annotation does not parse.
func request(svc *corev1.Service, nsLabels map[string]string) (lbipam.Request, string) {
	rq := lbipam.Request{
		Namespace: svc.Namespace, Name: svc.Name, UID: svc.UID,
		SharingKey:      svc.Annotations[lbv1alpha1.AllowSharedIPAnnotation],
		Pool:            svc.Annotations[lbv1alpha1.PoolAnnotation],
		NamespaceLabels: nsLabels, ServiceLabels: svc.Labels,
	}
	for _, p := range svc.Spec.Ports {
		rq.Ports = append(rq.Ports, string(p.Protocol)+"/"+strconv.Itoa(int(p.Port)))
	}
	slices.Sort(rq.Ports)
	if s := strings.TrimSpace(svc.Annotations[lbv1alpha1.AddressAnnotation]); s != "" {
		ip, err := netip.ParseAddr(s)
		if err != nil || !ip.Is4() {
			return rq, s
		}
		rq.Address = ip
	}
	return rq, ""
}

// listeners counts the listeners rq's namespace would have with rq's
// ports: every other Service of the namespace holding an assignment counts
// its ports (once, whichever pools hold it).
func listeners(pools []lbipam.Pool, rq lbipam.Request) int {
	n := len(rq.Ports)
	seen := map[types.UID]bool{rq.UID: true}
	for i := range pools {
		for _, a := range pools[i].Obj.Status.Assignments {
			if a.Service.Namespace == rq.Namespace && !seen[a.Service.UID] {
				seen[a.Service.UID] = true
				n += len(a.Ports)
			}
		}
	}
	return n
}

// valid reports whether an existing assignment still fits the request.
func valid(h held, rq lbipam.Request) bool {
	ip, err := netip.ParseAddr(h.a.Address)
	switch {
	case err != nil, h.a.Service.UID != rq.UID:
		return false
	case rq.Pool != "" && h.pool.Obj.Name != rq.Pool:
		return false
	case rq.Address.IsValid() && ip != rq.Address:
		return false
	case !lbipam.Grants(h.pool.Obj, rq.Namespace, rq.NamespaceLabels, rq.ServiceLabels):
		return false
	case !lbipam.Usable(h.pool.Ranges, h.pool.Obj.Spec.AvoidBuggyIPs, ip):
		return false
	}
	var others []lbv1alpha1.Assignment
	for _, a := range h.pool.Obj.Status.Assignments {
		if a.Address == h.a.Address {
			others = append(others, a)
		}
	}
	return lbipam.CanShare(others, rq)
}

// release removes the Service's assignments except keep ("pool/address").
func (r *Reconciler) release(ctx context.Context, current []held, keep string) error {
	for _, h := range current {
		if h.pool.Obj.Name+"/"+h.a.Address == keep && h.a.Service.UID != "" {
			continue
		}
		a := h.a
		if err := r.patchPool(ctx, h.pool.Obj, func(p *lbv1alpha1.IPAddressPool) {
			p.Status.Assignments = slices.DeleteFunc(p.Status.Assignments, func(x lbv1alpha1.Assignment) bool {
				return x.Address == a.Address && x.Service == a.Service
			})
		}); err != nil {
			return err
		}
	}
	return nil
}
