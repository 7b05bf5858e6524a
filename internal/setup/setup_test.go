package setup

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	workloadsv1alpha1 "github.com/converge-dev/converge/api/workloads/v1alpha1"
	"github.com/converge-dev/converge/internal/install"
	"github.com/converge-dev/converge/internal/secretcache"
	"github.com/converge-dev/converge/internal/webhookcert"
)

func TestControllerNames(t *testing.T) {
	g := NewWithT(t)
	names := ControllerNames()
	g.Expect(names).To(ContainElement("basicreplicaset"))
	g.Expect(slices.IsSorted(names)).To(BeTrue())
	g.Expect(len(slices.Compact(slices.Clone(names)))).To(Equal(len(names)), "controller names are unique")
	// Every registered controller can be looked up by its name.
	for _, n := range names {
		g.Expect(controllerByName(n).name).To(Equal(n))
	}
	g.Expect(func() { controllerByName("nope") }).To(Panic())
}

func TestSelectControllers(t *testing.T) {
	all := ControllerNames()
	cases := []struct {
		name    string
		spec    []string
		want    []string
		wantErr []string // substrings of the error; nil: no error
	}{
		{name: "nil means all", spec: nil, want: all},
		{name: "empty means all", spec: []string{}, want: all},
		{name: "star", spec: []string{"*"}, want: all},
		{name: "star with spaces", spec: []string{" * "}, want: all},
		{name: "star minus one", spec: []string{"*", "-basicreplicaset"}, want: allBut("basicreplicaset")},
		{name: "minus one then star", spec: []string{"-basicreplicaset", "*"}, want: allBut("basicreplicaset")},
		{name: "one by name", spec: []string{"basicreplicaset"}, want: []string{"basicreplicaset"}},
		{name: "only a disable", spec: []string{"-basicreplicaset"}, want: nil},
		{name: "unknown name", spec: []string{"nosuchcontroller"},
			wantErr: append([]string{`"nosuchcontroller"`, "known:"}, all...)},
		{name: "unknown disable", spec: []string{"*", "-unknown"},
			wantErr: append([]string{`"unknown"`, "known:"}, all...)},
		{name: "comma-joined is not split here", spec: []string{"*,-basicreplicaset"},
			wantErr: []string{`"*,-basicreplicaset"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := SelectControllers(tc.spec)
			if tc.wantErr != nil {
				g.Expect(err).To(HaveOccurred())
				for _, s := range tc.wantErr {
					g.Expect(err.Error()).To(ContainSubstring(s))
				}
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			if tc.want == nil {
				g.Expect(got).To(BeEmpty())
			} else {
				g.Expect(got).To(Equal(tc.want))
			}
		})
	}
}

// allBut lists every controller except one; nil when that leaves none.
func allBut(name string) []string {
	out := slices.DeleteFunc(ControllerNames(), func(n string) bool { return n == name })
	if len(out) == 0 {
		return nil
	}
	return out
}

func TestShardSelector(t *testing.T) {
	cases := []struct {
		key    string
		labels map[string]string
		match  bool
	}{
		{key: "", labels: nil, match: true},
		{key: "", labels: map[string]string{"app": "x"}, match: true},
		{key: "", labels: map[string]string{ShardLabel: "a"}, match: false},
		{key: "", labels: map[string]string{ShardLabel: ""}, match: false},
		{key: "a", labels: map[string]string{ShardLabel: "a"}, match: true},
		{key: "a", labels: map[string]string{ShardLabel: "a", "app": "x"}, match: true},
		{key: "a", labels: map[string]string{ShardLabel: "b"}, match: false},
		{key: "a", labels: nil, match: false},
		{key: "a", labels: map[string]string{"other.converge.dev/key": "a"}, match: false},
	}
	for _, tc := range cases {
		t.Run("key="+tc.key+","+labels.Set(tc.labels).String(), func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(ShardSelector(tc.key).Matches(labels.Set(tc.labels))).To(Equal(tc.match))
		})
	}
}

func TestCacheOptionsShardConvergeKindsOnly(t *testing.T) {
	g := NewWithT(t)
	co := cacheOptions(Options{ShardKey: "a", WatchNamespaces: []string{"ns1", "ns2"}}, secretcache.NewBudget(-1))
	g.Expect(co.DefaultNamespaces).To(HaveLen(2))
	g.Expect(co.DefaultNamespaces).To(HaveKey("ns1"))
	g.Expect(co.DefaultNamespaces).To(HaveKey("ns2"))
	// One entry per sharded kind, and the Secrets' (data stripped, not
	// sharded: children carry no shard label).
	g.Expect(co.ByObject).To(HaveLen(len(shardedKinds()) + 1))
	for obj, by := range co.ByObject {
		if _, ok := obj.(*corev1.Secret); ok {
			g.Expect(by.Label).To(BeNil())
			g.Expect(by.Transform).NotTo(BeNil())
			continue
		}
		g.Expect(reflect.TypeOf(obj).Elem().PkgPath()).To(HavePrefix("github.com/converge-dev/converge/api/"),
			"only Converge kinds are sharded; children carry no shard label")
		g.Expect(by.Label.String()).To(Equal(ShardSelector("a").String()))
	}
	g.Expect(cacheOptions(Options{}, secretcache.NewBudget(-1)).DefaultNamespaces).To(BeEmpty(), "no namespaces: watch all")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}}}
	out, err := co.DefaultTransform(cm)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.(*corev1.ConfigMap).ManagedFields).To(BeNil(), "cached objects carry no managed fields")
	g.Expect(out.(*corev1.ConfigMap).Name).To(Equal("x"))
	g.Expect(cacheOptions(Options{CacheAllSecretData: true}, secretcache.NewBudget(-1)).ByObject).NotTo(HaveKey(BeAssignableToTypeOf(&corev1.Secret{})),
		"--cache-all-secret-data: Secrets cached as controller-runtime caches them")

	// Every Converge kind is sharded, including the ones added after the
	// list was first written (a QemuMachine reconciled by two managers
	// gets two VMs).
	kinds := map[string]bool{}
	for obj, by := range co.ByObject {
		if by.Label != nil {
			kinds[reflect.TypeOf(obj).Elem().Name()] = true
		}
	}
	for _, k := range []string{"Sync", "GitRepository", "BasicDeployment", "BasicReplicaSet", "Database", "DatabaseBackup",
		"PostgresInstance", "MariaDBInstance", "Machine", "QemuMachine", "KwokMachine", "Certificate", "CertificateRequest",
		"Issuer", "ClusterIssuer", "IPAddressPool", "L2Advertisement"} {
		g.Expect(kinds).To(HaveKey(k))
	}
}

func TestLeaderElectionID(t *testing.T) {
	cases := []struct {
		name string
		o    Options
		want string
	}{
		{name: "no shard", o: Options{LeaderElectionID: "converge-manager"}, want: "converge-manager"},
		{name: "shard", o: Options{LeaderElectionID: "converge-manager", ShardKey: "blue"}, want: "converge-manager-blue"},
		{name: "defaults", o: DefaultOptions(), want: "converge-manager"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(leaderElectionID(tc.o)).To(Equal(tc.want))
		})
	}
	// Two shards never share a Lease.
	a, b := DefaultOptions(), DefaultOptions()
	a.ShardKey, b.ShardKey = "a", "b"
	NewWithT(t).Expect(leaderElectionID(a)).NotTo(Equal(leaderElectionID(b)))
}

// TestEveryCRDIsInTheScheme catches an API added to config/crd but not
// registered in Scheme (the manager could not decode it), and the reverse.
func TestEveryCRDIsInTheScheme(t *testing.T) {
	g := NewWithT(t)
	crds, err := install.CRDs()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(crds).NotTo(BeEmpty())
	s := Scheme()

	withCRD := map[schema.GroupKind]bool{}
	for _, crd := range crds {
		gk := schema.GroupKind{Group: crd.Spec.Group, Kind: crd.Spec.Names.Kind}
		withCRD[gk] = true
		g.Expect(gk.Group).To(HaveSuffix(".converge.dev"), "CRD %s", crd.Name)
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			gv := schema.GroupVersion{Group: gk.Group, Version: v.Name}
			g.Expect(s.Recognizes(gv.WithKind(gk.Kind))).To(BeTrue(), "%s is not registered in setup.Scheme()", gv.WithKind(gk.Kind))
			listKind := crd.Spec.Names.ListKind
			if listKind == "" {
				listKind = gk.Kind + "List"
			}
			g.Expect(s.Recognizes(gv.WithKind(listKind))).To(BeTrue(), "%s is not registered in setup.Scheme()", gv.WithKind(listKind))
		}
	}

	// And every Converge kind in the scheme has a CRD to be served from.
	for gvk, typ := range s.AllKnownTypes() {
		if !strings.HasSuffix(gvk.Group, ".converge.dev") ||
			!strings.HasPrefix(typ.PkgPath(), "github.com/converge-dev/converge/") ||
			strings.HasSuffix(gvk.Kind, "List") {
			continue
		}
		g.Expect(withCRD).To(HaveKey(gvk.GroupKind()), "%s is in the scheme but has no CRD in config/crd/bases", gvk)
	}
	g.Expect(withCRD).To(HaveKey(workloadsv1alpha1.GroupVersion.WithKind("BasicReplicaSet").GroupKind()))
}

func TestEmbeddedWebhookConfigurations(t *testing.T) {
	g := NewWithT(t)
	const base = "https://127.0.0.1:9443"
	muts, vals, err := install.WebhookConfigurations(base, []byte("ca"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(muts).To(HaveLen(1))
	g.Expect(vals).To(HaveLen(1))
	g.Expect(muts[0].Name).To(Equal(install.MutatingWebhookConfigurationName))
	g.Expect(vals[0].Name).To(Equal(install.ValidatingWebhookConfigurationName))

	// Webhook rules may only match resources Converge serves: a rule on ""
	// (core) or "*" would put every Pod write behind the manager.
	crds, err := install.CRDs()
	g.Expect(err).NotTo(HaveOccurred())
	served := map[schema.GroupResource]bool{}
	for _, crd := range crds {
		served[schema.GroupResource{Group: crd.Spec.Group, Resource: crd.Spec.Names.Plural}] = true
	}

	type webhook struct {
		name   string
		url    *string
		ca     []byte
		groups [][]string
		res    [][]string
		side   string
	}
	var all []webhook
	for _, m := range muts {
		for _, w := range m.Webhooks {
			g.Expect(w.ClientConfig.Service).To(BeNil(), w.Name)
			wh := webhook{name: w.Name, url: w.ClientConfig.URL, ca: w.ClientConfig.CABundle}
			if w.SideEffects != nil {
				wh.side = string(*w.SideEffects)
			}
			for _, r := range w.Rules {
				wh.groups = append(wh.groups, r.APIGroups)
				wh.res = append(wh.res, r.Resources)
			}
			all = append(all, wh)
		}
	}
	for _, v := range vals {
		for _, w := range v.Webhooks {
			g.Expect(w.ClientConfig.Service).To(BeNil(), w.Name)
			wh := webhook{name: w.Name, url: w.ClientConfig.URL, ca: w.ClientConfig.CABundle}
			if w.SideEffects != nil {
				wh.side = string(*w.SideEffects)
			}
			for _, r := range w.Rules {
				wh.groups = append(wh.groups, r.APIGroups)
				wh.res = append(wh.res, r.Resources)
			}
			all = append(all, wh)
		}
	}
	g.Expect(all).NotTo(BeEmpty())
	for _, w := range all {
		g.Expect(w.url).NotTo(BeNil(), w.name)
		g.Expect(*w.url).To(HavePrefix(base+"/"), w.name)
		g.Expect(*w.url).NotTo(HavePrefix(base+"//"), w.name)
		g.Expect(string(w.ca)).To(Equal("ca"), w.name)
		g.Expect(w.side).To(Equal("None"), w.name)
		g.Expect(w.groups).NotTo(BeEmpty(), "%s has no rules", w.name)
		for i, groups := range w.groups {
			g.Expect(groups).NotTo(BeEmpty(), w.name)
			for _, grp := range groups {
				g.Expect(grp).To(HaveSuffix(".converge.dev"), "%s: rule on group %q", w.name, grp)
				for _, r := range w.res[i] {
					g.Expect(served).To(HaveKey(schema.GroupResource{Group: grp, Resource: r}),
						"%s: rule on %s.%s, which no CRD defines", w.name, r, grp)
				}
			}
		}
	}

	// Without a URL the generated service reference is kept.
	muts, _, err = install.WebhookConfigurations("", []byte("ca"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(muts[0].Webhooks[0].ClientConfig.Service).NotTo(BeNil())
	g.Expect(muts[0].Webhooks[0].ClientConfig.URL).To(BeNil())
}

func TestLocalWebhook(t *testing.T) {
	g := NewWithT(t)
	g.Expect(LocalWebhookURL(9443)).To(Equal("https://127.0.0.1:9443"))
	o := LocalWebhookOptions("/tmp/x", 9443)
	g.Expect(o.CertDir).To(Equal("/tmp/x"))
	g.Expect(o.Port).To(Equal(9443))
	g.Expect(o.SelfManage).To(BeTrue())
	g.Expect(o.Hosts).To(ContainElement("127.0.0.1"), "the API server reaches the local webhook at 127.0.0.1")
}

func TestNewCertManagerValidation(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	hosts := []string{"127.0.0.1"}
	cases := []struct {
		name    string
		o       WebhookOptions
		wantErr string
		check   func(g Gomega, m *webhookcert.Manager)
	}{
		{name: "dir and secret", o: WebhookOptions{CertDir: "/tmp/x", CertSecret: "ns/name", Hosts: hosts}, wantErr: "exclusive"},
		{name: "neither", o: WebhookOptions{Hosts: hosts}, wantErr: "--webhook-cert-dir or --webhook-cert-secret"},
		{name: "secret without namespace", o: WebhookOptions{CertSecret: "name", Hosts: hosts}, wantErr: "want namespace/name"},
		{name: "secret with empty name", o: WebhookOptions{CertSecret: "ns/", Hosts: hosts}, wantErr: "want namespace/name"},
		{name: "no hosts", o: WebhookOptions{CertDir: "/tmp/x"}, wantErr: "at least one host"},
		{name: "dir", o: WebhookOptions{CertDir: "/tmp/x", Hosts: hosts}, check: func(g Gomega, m *webhookcert.Manager) {
			g.Expect(m.Store).To(Equal(webhookcert.DirStore{Dir: "/tmp/x"}))
			g.Expect(m.Client).To(BeNil(), "not self-managed: no injection")
			g.Expect(m.SelfManage).To(BeFalse())
		}},
		{name: "secret", o: WebhookOptions{CertSecret: "converge-system/webhook-cert", Hosts: hosts, SelfManage: true},
			check: func(g Gomega, m *webhookcert.Manager) {
				s, ok := m.Store.(*webhookcert.SecretStore)
				g.Expect(ok).To(BeTrue())
				g.Expect(s.Namespace).To(Equal("converge-system"))
				g.Expect(s.Name).To(Equal("webhook-cert"))
				g.Expect(m.Client).NotTo(BeNil(), "self-managed: injects the CA bundle")
				g.Expect(m.MutatingConfigs).To(Equal([]string{install.MutatingWebhookConfigurationName}))
				g.Expect(m.ValidatingConfigs).To(Equal([]string{install.ValidatingWebhookConfigurationName}))
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			m, err := newCertManager(cfg, tc.o, Scheme())
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			tc.check(g, m)
		})
	}
}

// TestQemuMachinesMode: --qemu-machines takes manager (the default, also
// empty) or agent; anything else is refused before the manager is built.
func TestQemuMachinesMode(t *testing.T) {
	o := DefaultOptions()
	o.Machines.QemuMachines = "node"
	_, err := New(t.Context(), &rest.Config{Host: "https://127.0.0.1:1"}, o)
	if err == nil || !strings.Contains(err.Error(), `--qemu-machines="node"`) {
		t.Fatalf("setup.New with --qemu-machines=node: got %v, want it refused naming the flag", err)
	}
}
