package machinebmc_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bmcv1alpha1 "github.com/converge-dev/converge/api/bmc/v1alpha1"
	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	"github.com/converge-dev/converge/internal/bmc"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
	"github.com/converge-dev/converge/internal/testpeer"
	"github.com/converge-dev/converge/internal/webhookcert"
)

// caSecret is where the suite's managers keep the BMC CA (the default of
// local mode: converge-system/converge-bmc-ca).
var caSecret = setup.BMCOptions{}.CASecretKey()

// servedLeaf opens a TLS connection to a Redfish endpoint trusting pool
// only (verified for the endpoint's host, as any client does) and returns
// the certificate it served.
func servedLeaf(ctx context.Context, endpoint string, pool *x509.CertPool) (*x509.Certificate, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, err
	}
	d := &tls.Dialer{Config: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	c, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.Close() }()
	return c.(*tls.Conn).ConnectionState().PeerCertificates[0], nil
}

func poolOf(t *testing.T, pemBundle string) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(pemBundle)) {
		t.Fatalf("no certificate in the bundle %q", pemBundle)
	}
	return pool
}

// The Redfish certificate is issued by the BMC CA, which the manager keeps
// in a Secret of its namespace and every MachineBMC publishes in
// status.redfishCABundle: curl --cacert with that bundle (and no -k)
// reaches the endpoint, and so does a Go client trusting nothing else;
// a client trusting another CA is refused.
func TestRedfishCertificateVerifies(t *testing.T) {
	testpeer.NeedTool(t, "curl", "curl")
	b, _ := readyBMC(t, "verified")
	g := NewWithT(t)
	ctx := t.Context()
	g.Expect(b.Status.RedfishCABundle).To(HavePrefix("-----BEGIN CERTIFICATE-----"))
	sec := &corev1.Secret{}
	g.Expect(env.Client.Get(ctx, caSecret, sec)).To(Succeed())
	g.Expect(sec.Type).To(Equal(corev1.SecretTypeTLS))
	g.Expect(string(sec.Data[corev1.TLSCertKey])).To(Equal(b.Status.RedfishCABundle), "the status publishes the CA of the Secret")
	g.Expect(sec.Data[bmc.CABundleKey]).To(Equal(sec.Data[corev1.TLSCertKey]))

	bundle := filepath.Join(t.TempDir(), "bmc-ca.pem")
	g.Expect(os.WriteFile(bundle, []byte(b.Status.RedfishCABundle), 0o600)).To(Succeed())
	out, err := exec.CommandContext(ctx, "curl", "-sS", "--fail", "--cacert", bundle, b.Status.RedfishEndpoint+"/redfish/v1/").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "curl --cacert: %s", out)
	g.Expect(string(out)).To(ContainSubstring(`"@odata.id":"/redfish/v1/"`))

	pool := poolOf(t, b.Status.RedfishCABundle)
	leaf, err := servedLeaf(ctx, b.Status.RedfishEndpoint, pool)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(leaf.IsCA).To(BeFalse(), "the served certificate is a leaf of the CA, not a CA")
	g.Expect(leaf.ExtKeyUsage).To(Equal([]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}))
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	defer hc.CloseIdleConnections()
	rsp, err := hc.Get(b.Status.RedfishEndpoint + "/redfish/v1/")
	g.Expect(err).NotTo(HaveOccurred())
	_ = rsp.Body.Close()
	g.Expect(rsp.StatusCode).To(Equal(http.StatusOK))

	other, err := bmc.NewCA()
	g.Expect(err).NotTo(HaveOccurred())
	_, err = servedLeaf(ctx, b.Status.RedfishEndpoint, other.CAPool())
	g.Expect(err).To(MatchError(ContainSubstring("certificate signed by unknown authority")))
}

// The CA outlives the manager: a manager started after another one stopped
// serves the BMC with a certificate it issued itself (a new one) from the
// same CA, read from the same Secret (never made again), so the bundle
// clients hold keeps verifying.
func TestCASurvivesARestart(t *testing.T) {
	testenv.Need(t, env)
	ns := env.NewNamespace(t)
	g := NewWithT(t)
	ctx := t.Context()
	shard := "bmc-ca-restart"
	labels := map[string]string{setup.ShardLabel: shard}
	replica := func(o *setup.Options) {
		o.Controllers = []string{"machinebmc"}
		o.ShardKey = shard
	}
	stopA := env.StartManager(t, replica)
	g.Expect(env.Client.Create(ctx, &machinev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m", Labels: labels},
		Spec: machinev1alpha1.MachineSpec{InfrastructureRef: machinev1alpha1.InfrastructureReference{
			APIVersion: infrastructurev1alpha1.GroupVersion.String(), Kind: "KwokMachine", Name: "m"}}})).To(Succeed())
	secret(t, ns, "m", "admin", "pw-12345")
	b := &bmcv1alpha1.MachineBMC{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m", Labels: labels}, Spec: bmcv1alpha1.MachineBMCSpec{
		MachineRef: bmcv1alpha1.LocalObjectReference{Name: "m"}, AuthSecretRef: bmcv1alpha1.LocalObjectReference{Name: "m"},
		Protocols: []bmcv1alpha1.Protocol{bmcv1alpha1.ProtocolRedfish}}}
	g.Expect(env.Client.Create(ctx, b)).To(Succeed())
	b = waitBMC(t, b, func(g Gomega, b *bmcv1alpha1.MachineBMC) {
		testenv.HasCondition(g, b.Status.Conditions, bmcv1alpha1.ReadyCondition, metav1.ConditionTrue, bmcv1alpha1.ServingReason)
		g.Expect(b.Status.RedfishCABundle).NotTo(BeEmpty())
	})
	before := &corev1.Secret{}
	g.Expect(env.Client.Get(ctx, caSecret, before)).To(Succeed())
	bundle := b.Status.RedfishCABundle
	g.Expect(string(before.Data[corev1.TLSCertKey])).To(Equal(bundle))
	pool := poolOf(t, bundle)
	first, err := servedLeaf(ctx, b.Status.RedfishEndpoint, pool)
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(stopA()).To(Succeed())
	env.StartManager(t, replica)
	var second *x509.Certificate
	g.Eventually(func(g Gomega) {
		cur := &bmcv1alpha1.MachineBMC{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(b), cur)).To(Succeed())
		g.Expect(cur.Status.RedfishCABundle).To(Equal(bundle), "the CA changed")
		leaf, err := servedLeaf(ctx, cur.Status.RedfishEndpoint, pool)
		g.Expect(err).NotTo(HaveOccurred(), "the old bundle verifies the new manager's certificate")
		g.Expect(leaf.SerialNumber).NotTo(Equal(first.SerialNumber), "still the first manager's certificate")
		second = leaf
	}).WithTimeout(wait).WithPolling(200 * time.Millisecond).Should(Succeed())
	g.Expect(second.Issuer.CommonName).To(Equal("converge-bmc-ca"))
	after := &corev1.Secret{}
	g.Expect(env.Client.Get(ctx, caSecret, after)).To(Succeed())
	g.Expect(after.UID).To(Equal(before.UID), "the CA Secret was made again")
	g.Expect(after.ResourceVersion).To(Equal(before.ResourceVersion), "the CA Secret was written to")
}

// Replicas starting at once end with one CA: the Secret is created with
// create-only semantics, and a manager that loses the race reads the
// winner's. A Secret that holds no valid CA is an error and is never
// overwritten.
func TestCAIsCreatedOnce(t *testing.T) {
	testenv.Need(t, env)
	ns := env.NewNamespace(t)
	g := NewWithT(t)
	ctx := t.Context()
	key := types.NamespacedName{Namespace: ns, Name: "race"}
	const n = 8
	var wg sync.WaitGroup
	cas := make([]*webhookcert.Bundle, n)
	created := make([]bool, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			cas[i], created[i], errs[i] = bmc.LoadOrCreateCA(ctx, env.Client, env.Client, key)
		}()
	}
	close(start)
	wg.Wait()
	made := 0
	for i := range n {
		g.Expect(errs[i]).NotTo(HaveOccurred())
		g.Expect(cas[i].CACert).To(Equal(cas[0].CACert), "replica %d ended with another CA", i)
		if created[i] {
			made++
		}
	}
	g.Expect(made).To(Equal(1), "the Secret was created once")
	sec := &corev1.Secret{}
	g.Expect(env.Client.Get(ctx, key, sec)).To(Succeed())
	g.Expect(sec.Data[corev1.TLSCertKey]).To(Equal(cas[0].CACert))

	// A manager whose read came before another's create (so it creates
	// too, and gets AlreadyExists) ends with the CA that was made.
	again, made2, err := bmc.LoadOrCreateCA(ctx, &notFoundOnce{Reader: env.Client}, env.Client, key)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(made2).To(BeFalse())
	g.Expect(again.CACert).To(Equal(cas[0].CACert), "the loser of the race kept a CA of its own")

	bad := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad"}, Data: map[string][]byte{corev1.TLSCertKey: []byte("not a certificate")}}
	g.Expect(env.Client.Create(ctx, bad)).To(Succeed())
	_, _, err = bmc.LoadOrCreateCA(ctx, env.Client, env.Client, client.ObjectKeyFromObject(bad))
	g.Expect(err).To(MatchError(ContainSubstring("holds no valid CA (delete it to have a new one made)")))
	got := &corev1.Secret{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(bad), got)).To(Succeed())
	g.Expect(got.ResourceVersion).To(Equal(bad.ResourceVersion), "an invalid CA Secret was overwritten")

	// The leaf it issues names what it is asked to, and chains to it.
	served, err := cas[0].IssueServing([]string{"10.96.0.12", "bmc.example"}, time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	leaf, err := served.KeyPair()
	g.Expect(err).NotTo(HaveOccurred())
	for _, h := range []string{"10.96.0.12", "bmc.example"} {
		_, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: h, Roots: cas[1].CAPool()})
		g.Expect(err).NotTo(HaveOccurred(), h)
	}
	_, err = leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "10.96.0.13", Roots: cas[1].CAPool()})
	g.Expect(err).To(HaveOccurred())
	g.Expect(net.ParseIP("10.96.0.12").Equal(leaf.Leaf.IPAddresses[0])).To(BeTrue())
}

// notFoundOnce answers NotFound to its first Get, as a read that came just
// before another manager's create.
type notFoundOnce struct {
	client.Reader
	done bool
}

func (r *notFoundOnce) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if !r.done {
		r.done = true
		return apierrors.NewNotFound(corev1.Resource("secrets"), key.Name)
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}
