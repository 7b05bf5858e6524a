package up

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1alpha1 "github.com/converge-dev/converge/api/lb/v1alpha1"
	"github.com/converge-dev/converge/internal/lbagent"
	"github.com/converge-dev/converge/internal/setup"
)

// DefaultLBPool is `converge up`'s load-balancer pool: loopback addresses,
// which every Linux host already has (all of 127.0.0.0/8 is local), so
// `curl <EXTERNAL-IP>` works on this machine right after a Service is
// created, without root.
const DefaultLBPool = "127.240.0.0/24"

// Names of what startLoadBalancer creates.
const (
	LBPoolName       = "local-loopback"
	LBNodeName       = "local"
	LBLeaseNamespace = "converge-system"
)

// startLoadBalancer creates the loopback pool and its L2Advertisement when
// missing (a pool the user changed is left as it is) and runs the
// load-balancer agent in this process with the userspace data plane,
// stopped (its listeners closed, its Leases deleted) before the manager.
func (p *Platform) startLoadBalancer(ctx context.Context, c client.Client, cfg *rest.Config, pool string) error {
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: LBLeaseNamespace}},
		&lbv1alpha1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: LBPoolName}, Spec: lbv1alpha1.IPAddressPoolSpec{Addresses: []string{pool}, AvoidBuggyIPs: true}},
		&lbv1alpha1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: LBPoolName}, Spec: lbv1alpha1.L2AdvertisementSpec{IPAddressPools: []string{LBPoolName}}},
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the local load balancer's %T %s: %w", o, o.GetName(), err)
		}
	}
	actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() {
		done <- lbagent.Run(actx, lbagent.Config{RESTConfig: cfg, Scheme: setup.Scheme(), NodeName: LBNodeName,
			LeaseNamespace: LBLeaseNamespace, DefaultClass: true, Userspace: true,
			Log: ctrl.Log.WithName("lbagent").WithValues("node", LBNodeName)})
	}()
	var once sync.Once
	p.stopLB = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					p.step("load balancer: %v", err)
				}
			case <-time.After(15 * time.Second):
				p.step("load balancer: the agent did not stop within 15s")
			}
		})
	}
	return nil
}
