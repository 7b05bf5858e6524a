package security

import (
	"net"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
	"github.com/converge-dev/converge/internal/controller/database"
	"github.com/converge-dev/converge/internal/controller/gitrepository"
	"github.com/converge-dev/converge/internal/controller/sqlinstance"
	"github.com/converge-dev/converge/internal/egress"
	"github.com/converge-dev/converge/internal/gitops/gittest"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

// chartEgress sets what the chart sets by default: the default denied
// networks, no exception, no file:// directory. (The suite's own manager
// allows loopback and the temporary directory, where its peers are.)
func chartEgress(o *setup.Options) {
	o.EgressDeniedCIDRs = egress.DefaultDenied
	o.EgressAllowedCIDRs = nil
	o.GitOps.FileRoots = nil
}

// counter is a loopback TCP listener that counts the connections it
// accepts: a victim service on the manager's node.
type counter struct {
	l net.Listener
	n atomic.Int64
}

func newCounter(t *testing.T) *counter {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &counter{l: l}
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			c.n.Add(1)
			_ = conn.Close()
		}
	}()
	t.Cleanup(func() { _ = l.Close() })
	return c
}

func (c *counter) port() int { return c.l.Addr().(*net.TCPAddr).Port }

func itoa(i int) string { return strconv.Itoa(i) }

// TestGitRepositoryReadsNoManagerFileAndDialsNoDeniedAddress: as the chart
// configures the manager, a tenant's GitRepository cannot read a git
// repository on the manager's file system (this very checkout, a path
// climbing out with "..") nor make the manager dial its own loopback, the
// metadata address or a name resolving to loopback. Each is Stalled
// URLNotAllowed naming the setting the admin would change; nothing is
// fetched, and the loopback victim never sees a connection. The same
// manager with the directory allowed fetches a file:// repository there.
func TestGitRepositoryReadsNoManagerFileAndDialsNoDeniedAddress(t *testing.T) {
	t.Parallel()
	tn := newTenant(t)
	g := NewWithT(t)
	srv := gittest.NewServer(t)
	allowed := srv.Root
	shard := "eg-" + tn.NS[len(tn.NS)-5:]
	labels := startGitOpsShard(t, shard, func(o *setup.Options) {
		chartEgress(o)
		o.Controllers = []string{gitrepository.ControllerName}
	})
	// A second shard: the chart's networks, one file:// directory.
	allowShard := "eg-ok-" + tn.NS[len(tn.NS)-5:]
	allowLabels := startGitOpsShard(t, allowShard, func(o *setup.Options) {
		chartEgress(o)
		o.Controllers = []string{gitrepository.ControllerName}
		o.GitOps.FileRoots = []string{allowed}
	})
	root, err := testenv.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	up, err := filepath.Rel(allowed, root)
	g.Expect(err).NotTo(HaveOccurred())
	climb := "file://" + allowed + "/" + up
	victim := newCounter(t)

	create := func(name, url string, l map[string]string) *gitopsv1alpha1.GitRepository {
		gr := &gitopsv1alpha1.GitRepository{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: name, Labels: l},
			Spec: gitopsv1alpha1.GitRepositorySpec{URL: url, Interval: &metav1.Duration{Duration: time.Hour}}}
		g.Expect(tn.Client.Create(t.Context(), gr)).To(Succeed())
		return gr
	}
	for _, a := range []struct{ name, url, words string }{
		{"checkout", "file://" + root, egress.FileRootsFlag},
		{"climb", climb, egress.FileRootsFlag},
		{"loopback", "http://127.0.0.1:" + itoa(victim.port()) + "/app.git", "127.0.0.0/8"},
		{"by-name", "http://localhost:" + itoa(victim.port()) + "/app.git", egress.AllowedFlag},
		{"ssh", "ssh://git@127.0.0.1:" + itoa(victim.port()) + "/app.git", "127.0.0.0/8"},
		{"git", "git://127.0.0.1:" + itoa(victim.port()) + "/app.git", "127.0.0.0/8"},
		{"metadata", "http://169.254.169.254/latest/meta-data.git", "169.254.0.0/16"},
	} {
		gr := create(a.name, a.url, labels)
		c := renderStalled(t, tn, gr, gitopsv1alpha1.URLNotAllowedReason)
		g.Expect(c.Message).To(ContainSubstring(a.words), a.name)
		g.Expect(gr.Status.Artifact).To(BeNil(), a.name)
	}
	// The shard that allows the directory refuses the climb out of it.
	renderStalled(t, tn, create("climb-allowed", climb, allowLabels), gitopsv1alpha1.URLNotAllowedReason)
	g.Expect(victim.n.Load()).To(BeZero(), "the manager dialled its own loopback for a tenant")

	// Inside the allowed directory a file:// repository is fetched.
	repo := srv.NewRepo(t, "ok")
	repo.Commit(t, "one", map[string]string{"cm.yaml": configMap("", "ok", nil)})
	ok := create("inside", repo.FileURL(), allowLabels)
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(tn.Client.Get(t.Context(), client.ObjectKeyFromObject(ok), ok)).To(Succeed())
		g.Expect(ok.Status.Artifact).NotTo(BeNil(), "%v", ok.Status.Conditions)
	}).WithTimeout(30 * time.Second).Should(Succeed())
}

// TestDatabaseInstanceDialsNoDeniedAddress: as the chart configures the
// manager, a tenant's PostgresInstance whose host is the manager's
// loopback is Stalled HostNotAllowed, and the victim listener there never
// sees a connection; nor does a Database of an instance whose provider
// published such an endpoint (here the cluster admin writes the status, as
// an out-of-tree provider would).
func TestDatabaseInstanceDialsNoDeniedAddress(t *testing.T) {
	t.Parallel()
	tn := newTenant(t)
	g := NewWithT(t)
	ctx := t.Context()
	shard := "eg-sql-" + tn.NS[len(tn.NS)-5:]
	env.StartManager(t, func(o *setup.Options) {
		chartDefaults(o)
		chartEgress(o)
		o.Controllers = []string{sqlinstance.PostgresControllerName}
		o.ShardKey = shard
	})
	victim := newCounter(t)
	g.Expect(env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: "admin"},
		StringData: map[string]string{"username": "postgres", "password": "guess"}})).To(Succeed())
	spec := sqlv1alpha1.InstanceSpec{Host: "127.0.0.1", Port: int32(victim.port()), AdminSecretRef: sqlv1alpha1.SecretReference{Name: "admin"}}
	inst := &sqlv1alpha1.PostgresInstance{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: "node",
		Labels: map[string]string{setup.ShardLabel: shard}}, Spec: spec}
	g.Expect(tn.Client.Create(ctx, inst)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(tn.Client.Get(ctx, client.ObjectKeyFromObject(inst), inst)).To(Succeed())
		ready := meta.FindStatusCondition(inst.Status.Conditions, sqlv1alpha1.ReadyCondition)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Reason).To(Equal(sqlv1alpha1.HostNotAllowedReason), ready.Message)
		g.Expect(ready.Message).To(ContainSubstring(egress.AllowedFlag))
		stalled := meta.FindStatusCondition(inst.Status.Conditions, sqlv1alpha1.StalledCondition)
		g.Expect(stalled).NotTo(BeNil())
		g.Expect(stalled.Reason).To(Equal(sqlv1alpha1.HostNotAllowedReason))
	}).WithTimeout(30 * time.Second).Should(Succeed())

	// A provider's published endpoint: the Database controller alone on
	// its own shard, the instance's status written by the admin.
	dbShard := "eg-db-" + tn.NS[len(tn.NS)-5:]
	env.StartManager(t, func(o *setup.Options) {
		chartDefaults(o)
		chartEgress(o)
		o.Controllers = []string{database.ControllerName}
		o.ShardKey = dbShard
	})
	pub := &sqlv1alpha1.PostgresInstance{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: "published",
		Labels: map[string]string{setup.ShardLabel: dbShard}}, Spec: spec}
	g.Expect(env.Client.Create(ctx, pub)).To(Succeed())
	pub.Status = sqlv1alpha1.InstanceStatus{Ready: true, Engine: sqlv1alpha1.EnginePostgres, Version: "17",
		Endpoint:       &sqlv1alpha1.Endpoint{Host: "localhost", Port: int32(victim.port())},
		AdminSecretRef: &sqlv1alpha1.SecretReference{Name: "admin"}, ObservedGeneration: pub.Generation}
	g.Expect(env.Client.Status().Update(ctx, pub)).To(Succeed())
	d := &sqlv1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: "app", Labels: map[string]string{setup.ShardLabel: dbShard}},
		Spec: sqlv1alpha1.DatabaseSpec{InstanceRef: sqlv1alpha1.InstanceReference{APIVersion: sqlv1alpha1.GroupVersion.String(), Kind: "PostgresInstance", Name: "published"}}}
	g.Expect(tn.Client.Create(ctx, d)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(tn.Client.Get(ctx, client.ObjectKeyFromObject(d), d)).To(Succeed())
		stalled := meta.FindStatusCondition(d.Status.Conditions, sqlv1alpha1.StalledCondition)
		g.Expect(stalled).NotTo(BeNil(), "%v", d.Status.Conditions)
		g.Expect(stalled.Reason).To(Equal(sqlv1alpha1.HostNotAllowedReason), stalled.Message)
		g.Expect(stalled.Message).To(ContainSubstring(egress.DeniedFlag))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(victim.n.Load()).To(BeZero(), "the manager dialled its own loopback for a tenant")
}
