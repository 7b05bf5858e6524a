package lbagent

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1alpha1 "github.com/converge-dev/converge/api/lb/v1alpha1"
	"github.com/converge-dev/converge/internal/lbdataplane"
	"github.com/converge-dev/converge/internal/netns"
	"github.com/converge-dev/converge/pkg/reconcile"
)

// probeJob asks for one Service to be probed through its address.
type probeJob struct {
	key string // namespace/name
	svc *corev1.Service
	dp  lbdataplane.Service
	sig string
}

type probeResult struct {
	sig string
	at  time.Time
}

// prober probes owned Services off the sync loop, so a slow or
// unreachable endpoint never delays failover.
type prober struct {
	a        *agent
	queue    chan probeJob
	mu       sync.Mutex
	results  map[string]probeResult
	inflight map[string]bool
}

// schedule queues a probe for every owned Service whose data plane changed
// (new owner, endpoints, ports) or whose last probe is ProbeInterval old.
func (p *prober) schedule(owned map[netip.Addr]*vipState, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, st := range owned {
		for i, svc := range st.services {
			key := svc.Namespace + "/" + svc.Name
			sig := fmt.Sprintf("%s|%v|%d", svc.UID, st.dataplane[i], svc.Generation)
			r, ok := p.results[key]
			if p.inflight[key] || (ok && r.sig == sig && now.Sub(r.at) < p.a.cfg.ProbeInterval) {
				continue
			}
			select {
			case p.queue <- probeJob{key: key, svc: svc, dp: st.dataplane[i], sig: sig}:
				p.inflight[key] = true
			default:
			}
		}
	}
}

func (p *prober) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case j := <-p.queue:
			p.probe(ctx, j)
			p.mu.Lock()
			delete(p.inflight, j.key)
			p.mu.Unlock()
		}
	}
}

// probe connects to every TCP VIP:port through the data plane and writes
// the outcome on the Service.
func (p *prober) probe(ctx context.Context, j probeJob) {
	status, reason, msg := p.check(ctx, j.dp)
	if err := p.a.writeStatus(ctx, j.svc, j.dp.VIP, status, reason, msg); err != nil {
		p.a.cfg.Log.V(1).Info("Writing Service status failed; retrying", "service", j.key, "error", err.Error())
		return // not recorded: retried on the next schedule
	}
	p.mu.Lock()
	p.results[j.key] = probeResult{sig: j.sig, at: time.Now()}
	p.mu.Unlock()
}

// check is the probe itself: a TCP connection from this node to VIP:port
// traverses the nat output hook, is DNATed to an endpoint and completes
// only if that endpoint accepted it. UDP has no generic handshake, so UDP
// ports count as programmed when they have endpoints.
func (p *prober) check(ctx context.Context, dp lbdataplane.Service) (metav1.ConditionStatus, string, string) {
	var tcp, udp []string
	withEndpoints := 0
	for _, port := range dp.Ports {
		if len(port.Endpoints) == 0 {
			continue
		}
		withEndpoints++
		target := net.JoinHostPort(dp.VIP.String(), strconv.Itoa(int(port.Port)))
		if port.Protocol == "udp" {
			udp = append(udp, target)
			continue
		}
		probe := func() error { return dialIn(ctx, p.a.cfg.NetNS, target, p.a.cfg.ProbeTimeout) }
		if p.a.proxy != nil {
			probe = func() error {
				return lbdataplane.ProbeTCP(ctx, p.a.cfg.NetNS, target, p.a.cfg.ProbeTimeout, 200*time.Millisecond)
			}
		}
		if err := probe(); err != nil {
			return metav1.ConditionFalse, lbv1alpha1.UnreachableReason,
				fmt.Sprintf("no endpoint answered a connection to %s through the data plane on node %s: %v", target, p.a.cfg.NodeName, err)
		}
		tcp = append(tcp, target)
	}
	if withEndpoints == 0 {
		if dp.Local {
			return metav1.ConditionFalse, lbv1alpha1.NoReadyEndpointsReason,
				fmt.Sprintf("address %s announced by node %s, but the Service has no ready endpoint on any node (externalTrafficPolicy Local uses only endpoints that name their node)", dp.VIP, p.a.cfg.NodeName)
		}
		return metav1.ConditionFalse, lbv1alpha1.NoReadyEndpointsReason,
			fmt.Sprintf("address %s announced by node %s, but the Service has no ready endpoints", dp.VIP, p.a.cfg.NodeName)
	}
	msg := fmt.Sprintf("announced by node %s", p.a.cfg.NodeName)
	if dp.Local {
		msg += " (externalTrafficPolicy Local: its endpoints on that node, client addresses kept)"
	}
	if len(tcp) > 0 {
		msg = fmt.Sprintf("reached an endpoint through %s; %s", strings.Join(tcp, ", "), msg)
	}
	if len(udp) > 0 {
		msg += fmt.Sprintf("; UDP %s programmed (UDP is not probed)", strings.Join(udp, ", "))
	}
	return metav1.ConditionTrue, lbv1alpha1.ReachableReason, msg
}

func dialIn(ctx context.Context, ns, target string, timeout time.Duration) error {
	var conn net.Conn
	err := netns.Do(ns, func() error {
		d := net.Dialer{Timeout: timeout}
		c, err := d.DialContext(ctx, "tcp", target)
		conn = c
		return err
	})
	if conn != nil {
		_ = conn.Close()
	}
	return err
}

// writeStatus sets LoadBalancerReady and, once reachable, the ingress, on
// the cached Service through reconcile's StatusPatcher (optimistic lock;
// on conflict only this change is re-applied).
func (a *agent) writeStatus(ctx context.Context, cached *corev1.Service, vip netip.Addr, status metav1.ConditionStatus, reason, msg string) error {
	svc := &corev1.Service{}
	if err := a.cache.Get(ctx, client.ObjectKeyFromObject(cached), svc); err != nil {
		return err
	}
	if svc.UID != cached.UID {
		return nil
	}
	p := reconcile.NewStatusPatcher(a.client, svc)
	after := svc.DeepCopy()
	reconcile.SetCondition(&after.Status.Conditions, svc.Generation, lbv1alpha1.LoadBalancerReadyCondition, status, reason, msg)
	if status == metav1.ConditionTrue {
		after.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: vip.String(), IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)}}
	}
	return p.Patch(ctx, after)
}
