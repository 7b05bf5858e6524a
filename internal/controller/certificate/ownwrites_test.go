package certificate_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/controller/certificate"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

// behindReader is a real informer cache that the test can hold one read
// behind: the next Get of a key set with serveOnce returns the object given
// (nil: not found) instead of the cache's current copy, as a cache that has
// not caught up with a write would.
type behindReader struct {
	client.Reader
	mu   sync.Mutex
	once map[string]client.Object
}

func behindKey(obj client.Object, key types.NamespacedName) string {
	return fmt.Sprintf("%T/%s", obj, key)
}

func (b *behindReader) serveOnce(obj client.Object, key types.NamespacedName, stale client.Object) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.once[behindKey(obj, key)] = stale
}

func (b *behindReader) Get(ctx context.Context, key types.NamespacedName, obj client.Object, opts ...client.GetOption) error {
	b.mu.Lock()
	stale, ok := b.once[behindKey(obj, key)]
	delete(b.once, behindKey(obj, key))
	b.mu.Unlock()
	switch {
	case !ok:
		return b.Reader.Get(ctx, key, obj, opts...)
	case stale == nil:
		return apierrors.NewNotFound(schema.GroupResource{Resource: fmt.Sprintf("%T", obj)}, key.Name)
	default:
		return setup.Scheme().Convert(stale.DeepCopyObject(), obj, nil)
	}
}

// TestOwnWritesKeepAStaleCacheFromIssuingTwice drives the certificate
// reconciler by hand over a cache the test holds behind the controller's
// own writes, where the reconciler makes no uncached read (a selfSigned
// issuer trusts the cache):
//   - a reconcile that reads the Certificate as it was before the
//     controller's own Issuing=True write does nothing and looks again
//     (without certWrites it would end the issuance from that read, leave
//     Issuing=True behind, and the next reconcile would issue a third
//     revision);
//   - a reconcile that reads the Secret as missing right after the
//     controller wrote it does nothing and looks again (without secretWrites
//     it would start a new issuance).
func TestOwnWritesKeepAStaleCacheFromIssuingTwice(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	// The signer: issuer and certificaterequest controllers of a shard the
	// suite's manager does not reconcile; the Certificate's reconciler is
	// this test.
	const shard = "own-writes"
	stop := env.StartManager(t, func(o *setup.Options) {
		o.Controllers = []string{"issuer", "certificaterequest"}
		o.ShardKey = shard
	})
	defer func() { _ = stop() }()
	ns := env.NewNamespace(t)
	labels := map[string]string{setup.ShardLabel: shard}
	iss := &pkiv1alpha1.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "selfsigned", Labels: labels},
		Spec: pkiv1alpha1.IssuerSpec{SelfSigned: &pkiv1alpha1.SelfSignedIssuer{}}}
	g.Expect(env.Client.Create(ctx, iss)).To(Succeed())

	informers, err := cache.New(env.Config, cache.Options{Scheme: setup.Scheme(), DefaultNamespaces: map[string]cache.Config{ns: {}}})
	g.Expect(err).NotTo(HaveOccurred())
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = informers.Start(cctx) }()
	for _, o := range []client.Object{&pkiv1alpha1.Certificate{}, &pkiv1alpha1.CertificateRequest{}, &corev1.Secret{}, &pkiv1alpha1.Issuer{}} {
		_, err := informers.GetInformer(ctx, o)
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(informers.WaitForCacheSync(ctx)).To(BeTrue())
	behind := &behindReader{Reader: informers, once: map[string]client.Object{}}
	c, err := client.New(env.Config, client.Options{Scheme: setup.Scheme(), Cache: &client.CacheOptions{Reader: behind}})
	g.Expect(err).NotTo(HaveOccurred())
	r := certificate.NewUntrackedReconciler(c, env.Client, events.NewFakeRecorder(1000))

	cert := newCert(ns, "web", "selfsigned", "a.example.com")
	cert.Labels = labels
	g.Expect(env.Client.Create(ctx, cert)).To(Succeed())
	key := client.ObjectKeyFromObject(cert)
	secretKey := types.NamespacedName{Namespace: ns, Name: cert.Spec.SecretName}
	live := func() *pkiv1alpha1.Certificate {
		var l pkiv1alpha1.Certificate
		g.Expect(env.Client.Get(ctx, key, &l)).To(Succeed())
		return &l
	}
	cached := func() *pkiv1alpha1.Certificate {
		var l pkiv1alpha1.Certificate
		g.Expect(informers.Get(ctx, key, &l)).To(Succeed())
		return &l
	}
	secretRV := func() string {
		var s corev1.Secret
		if err := env.Client.Get(ctx, secretKey, &s); err != nil {
			return ""
		}
		return s.ResourceVersion
	}
	// reconcileUntil calls Reconcile, as a work queue would, until done
	// holds right after a call that wrote the Secret (or any call when
	// secretWrite is false).
	reconcileUntil := func(what string, secretWrite bool, done func() bool) {
		t.Helper()
		for range 300 {
			before := secretRV()
			if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
				t.Logf("reconcile: %v", err)
			}
			if done() && (!secretWrite || secretRV() != before) {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("%s: not reached; Certificate status %+v", what, live().Status)
	}
	requests := func() []string {
		var l pkiv1alpha1.CertificateRequestList
		g.Expect(env.Client.List(ctx, &l, client.InNamespace(ns))).To(Succeed())
		var out []string
		for _, cr := range l.Items {
			out = append(out, cr.Name)
		}
		return out
	}
	// settle runs the reconciles a work queue would run next.
	settle := func() {
		for range 20 {
			_, _ = r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
			time.Sleep(50 * time.Millisecond)
		}
	}
	revision := func(want int32) func() bool {
		return func() bool {
			l := live()
			return ptr.Deref(l.Status.Revision, 0) == want && meta.IsStatusConditionTrue(l.Status.Conditions, pkiv1alpha1.ReadyCondition)
		}
	}
	reconcileUntil("revision 1", true, revision(1))

	// A spec change: the reconcile that starts the new issuance writes
	// Ready=False and Issuing=True at once (SpecChanged).
	l := live()
	l.Spec.DNSNames = []string{"b.example.com"}
	g.Expect(env.Client.Update(ctx, l)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) { g.Expect(cached().Generation).To(Equal(l.Generation)) }).Should(Succeed())
	beforeIssuing := cached()
	g.Expect(meta.FindStatusCondition(beforeIssuing.Status.Conditions, pkiv1alpha1.IssuingCondition)).To(BeNil())
	reconcileUntil("Issuing=True", false, func() bool {
		return meta.IsStatusConditionTrue(live().Status.Conditions, pkiv1alpha1.IssuingCondition)
	})
	testenv.Eventually(g, func(g Gomega) {
		var cr pkiv1alpha1.CertificateRequest
		g.Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web-2"}, &cr)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(cr.Status.Conditions, pkiv1alpha1.ReadyCondition)).To(BeTrue())
	}).Should(Succeed())

	// The request is signed; the next reconcile reads the Certificate as
	// it was before the controller's own Issuing=True write.
	behind.serveOnce(&pkiv1alpha1.Certificate{}, key, beforeIssuing)
	_, err = r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
	g.Expect(err).NotTo(HaveOccurred())
	reconcileUntil("revision 2", false, revision(2))
	settle()
	g.Expect(requests()).NotTo(ContainElement("web-3"), "a stale read of the Certificate started a third issuance")
	g.Expect(meta.FindStatusCondition(live().Status.Conditions, pkiv1alpha1.IssuingCondition)).To(BeNil(), "Issuing=True was left behind")
	g.Expect(ptr.Deref(live().Status.Revision, 0)).To(BeEquivalentTo(2))

	// Another spec change: right after the reconcile that writes its
	// Secret, the cache shows the Certificate's revision 3 (wait for it)
	// but not yet the Secret.
	l = live()
	l.Spec.DNSNames = []string{"c.example.com"}
	g.Expect(env.Client.Update(ctx, l)).To(Succeed())
	reconcileUntil("revision 3", true, revision(3))
	testenv.Eventually(g, func(g Gomega) { g.Expect(ptr.Deref(cached().Status.Revision, 0)).To(BeEquivalentTo(3)) }).Should(Succeed())
	behind.serveOnce(&corev1.Secret{}, secretKey, nil)
	_, err = r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
	g.Expect(err).NotTo(HaveOccurred())
	settle()
	g.Expect(requests()).NotTo(ContainElement("web-4"), "a stale read of the Secret started a fourth issuance")
	final := live()
	g.Expect(ptr.Deref(final.Status.Revision, 0)).To(BeEquivalentTo(3))
	g.Expect(meta.FindStatusCondition(final.Status.Conditions, pkiv1alpha1.IssuingCondition)).To(BeNil())
}
