package sync_test

import (
	"context"
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	lbv1alpha1 "github.com/converge-dev/converge/api/lb/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

const lbService = `apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  type: LoadBalancer
  selector: {app: web}
  ports:
  - {name: http, port: 80, targetPort: 8080}
`

// TestLoadBalancerServiceFromGit: a LoadBalancer Service committed to git and
// applied by a tenant's Sync with wait keeps the Sync waiting while it has
// no reachable address (a LoadBalancer Service is healthy when
// status.loadBalancer.ingress is set, as in kstatus): first because no pool
// grants its namespace one, then because no agent announces the address the
// pool assigned. Removing it from git prunes it and releases the address. Removing it from git releases the address.
func TestLoadBalancerServiceFromGit(t *testing.T) {
	testenv.Need(t, env)
	t.Parallel()
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	repo, h1, gr := setupRepo(t, ns, map[string]string{"lb/service.yaml": lbService})
	sy := newSync(ns, "lb", "app", "lb", true)
	sy.Spec.Wait = true
	g.Expect(env.Client.Create(ctx, sy)).To(Succeed())
	// No pool grants this namespace an address yet: applied, not Ready.
	testenv.Eventually(g, func(g Gomega) {
		s := getSync(g, t, ns, "lb")
		var msgs []string
		for _, c := range s.Status.Conditions {
			msgs = append(msgs, c.Message)
		}
		g.Expect(msgs).To(ContainElement(ContainSubstring("waiting for a load-balancer address")))
		g.Expect(meta.IsStatusConditionTrue(s.Status.Conditions, gitopsv1alpha1.ReadyCondition)).To(BeFalse())
	}).Should(Succeed())

	pool := &lbv1alpha1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "sync-" + ns},
		Spec: lbv1alpha1.IPAddressPoolSpec{Addresses: []string{"127.241.7.0/29"},
			ServiceAllocation: &lbv1alpha1.ServiceAllocation{Namespaces: []string{ns}}}}
	g.Expect(env.Client.Create(ctx, pool)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(context.WithoutCancel(ctx), pool) })
	// The pool assigns an address at once; the Service stays unhealthy
	// (and the Sync waiting) until an agent announces it and reaches an
	// endpoint through it: no agent runs here.
	testenv.Eventually(g, func(g Gomega) {
		p := &lbv1alpha1.IPAddressPool{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pool), p)).To(Succeed())
		g.Expect(p.Status.Assignments).To(HaveLen(1))
		a := p.Status.Assignments[0]
		g.Expect(a.Service.Namespace + "/" + a.Service.Name).To(Equal(ns + "/web"))
		ip, err := netip.ParseAddr(a.Address)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(netip.MustParsePrefix("127.241.7.0/29").Contains(ip)).To(BeTrue(), "from the granted pool: %s", ip)
		svc := &corev1.Service{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, svc)).To(Succeed())
		g.Expect(svc.Status.Conditions).To(ContainElement(HaveField("Reason", "AwaitingAnnouncement")))
	}).Should(Succeed())
	s := getSync(g, t, ns, "lb")
	g.Expect(meta.IsStatusConditionTrue(s.Status.Conditions, gitopsv1alpha1.ReadyCondition)).To(BeFalse(), "not reachable yet, so not Ready")
	ready := meta.FindStatusCondition(s.Status.Conditions, gitopsv1alpha1.ReadyCondition)
	g.Expect(ready.Message).To(ContainSubstring(h1 + " applied; waiting for Service/" + ns + "/web"))

	repo.Commit(t, "something else in the path", map[string]string{"lb/cm.yaml": configMap("keep", nil)})
	h2 := repo.Delete(t, "remove the service", "lb/service.yaml")
	requestReconcile(t, gr)
	waitApplied(t, g, ns, "lb", h2)
	testenv.Eventually(g, func(g Gomega) {
		p := &lbv1alpha1.IPAddressPool{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pool), p)).To(Succeed())
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &corev1.Service{})).NotTo(Succeed(), "pruned")
		g.Expect(p.Status.Assigned).To(BeZero(), "the address is released")
	}).Should(Succeed())
}
