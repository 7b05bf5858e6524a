package security

import (
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/internal/secretcache"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestTenantLabelCannotGrowTheSecretCache: the Secret cache's opt-in label
// is the tenant's to set, so it must not be a way to make the manager hold
// a tenant's data. A tenant labels ten 1 MiB Secrets converge.dev/cache-data
// (the attack that grew the manager by 139 MiB for 100 of them): the
// manager's informer keeps their metadata only, its cache budget does not
// grow by their data, and Converge still reads them whole when it needs to.
// A small labelled Secret is still cached whole: the label stays a hint.
func TestTenantLabelCannotGrowTheSecretCache(t *testing.T) {
	a := newTenant(t)
	g := NewWithT(t)
	ctx := t.Context()
	sc, ok := env.Platform.Converge.Manager.GetCache().(*secretcache.Reader)
	g.Expect(ok).To(BeTrue(), "the manager's cache is %T, not a secretcache.Reader", env.Platform.Converge.Manager.GetCache())
	before := sc.Budget.Used()

	const n, size = 10, 1 << 20
	blob := strings.Repeat("b", size)
	var blobs []*corev1.Secret
	for i := range n {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: a.NS, Name: fmt.Sprintf("blob-%d", i),
			Labels: map[string]string{secretcache.Label: "true"}}, Data: map[string][]byte{"k": []byte(blob)}}
		g.Expect(a.Client.Create(ctx, s)).To(Succeed(), "the tenant may create labelled Secrets in its namespace")
		blobs = append(blobs, s)
	}
	hint := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: a.NS, Name: "hint",
		Labels: map[string]string{secretcache.Label: "true"}}, Data: map[string][]byte{"tls.key": []byte(strings.Repeat("k", 4<<10))}}
	g.Expect(a.Client.Create(ctx, hint)).To(Succeed())

	testenv.Eventually(g, func(g Gomega) {
		for _, b := range blobs {
			s := &corev1.Secret{}
			g.Expect(sc.Cache.Get(ctx, client.ObjectKeyFromObject(b), s)).To(Succeed())
			g.Expect(s.Data).To(BeEmpty(), "the manager's informer keeps the data of a tenant's labelled 1 MiB Secret %s", b.Name)
		}
		s := &corev1.Secret{}
		g.Expect(sc.Cache.Get(ctx, client.ObjectKeyFromObject(hint), s)).To(Succeed())
		g.Expect(s.Data).To(HaveKey("tls.key"), "a small labelled Secret is no longer cached whole")
	}).Should(Succeed())
	// Other tests run beside this one and add small Secrets; the attack
	// would add n MiB.
	g.Expect(sc.Budget.Used()-before).To(BeNumerically("<", size),
		"the Secret cache's kept data grew by a tenant's labelled blobs")
	s := &corev1.Secret{}
	g.Expect(env.Platform.Converge.Manager.GetClient().Get(ctx, client.ObjectKeyFromObject(blobs[0]), s)).To(Succeed())
	g.Expect(len(s.Data["k"])).To(Equal(size), "a Secret kept out of the cache is still read whole by the manager")
}
