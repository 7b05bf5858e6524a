package security

import (
	"encoding/json"
	"net"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bmcv1alpha1 "github.com/converge-dev/converge/api/bmc/v1alpha1"
	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

// A tenant's MachineBMC cannot control another tenant's Machine: the
// references have no namespace, a smuggled one is dropped by the schema,
// and the names are looked up in the MachineBMC's namespace only. And a
// BMC serving the attacker's own Machine answers unauthenticated commands
// with nothing.
func TestMachineBMCCannotReachAnotherNamespace(t *testing.T) {
	victim, attacker := newTenant(t), newTenant(t)
	g := NewWithT(t)
	km := &infrastructurev1alpha1.KwokMachine{ObjectMeta: metav1.ObjectMeta{Namespace: victim.NS, Name: "target"}}
	g.Expect(victim.Client.Create(t.Context(), km)).To(Succeed())
	vm := &machinev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: victim.NS, Name: "target"},
		Spec: machinev1alpha1.MachineSpec{InfrastructureRef: machinev1alpha1.InfrastructureReference{
			APIVersion: infrastructurev1alpha1.GroupVersion.String(), Kind: "KwokMachine", Name: "target"}}}
	g.Expect(victim.Client.Create(t.Context(), vm)).To(Succeed())
	vs := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: victim.NS, Name: "target-bmc"},
		StringData: map[string]string{"username": "admin", "password": "victim-pw"}}
	g.Expect(victim.Client.Create(t.Context(), vs)).To(Succeed())

	u := &unstructured.Unstructured{}
	raw := `{"apiVersion":"bmc.converge.dev/v1alpha1","kind":"MachineBMC","metadata":{"name":"grab","namespace":"` + attacker.NS + `"},
	  "spec":{"machineRef":{"name":"target","namespace":"` + victim.NS + `"},"authSecretRef":{"name":"target-bmc","namespace":"` + victim.NS + `"}}}`
	g.Expect(json.Unmarshal([]byte(raw), &u.Object)).To(Succeed())
	g.Expect(attacker.Client.Create(t.Context(), u)).To(Succeed())

	got := &bmcv1alpha1.MachineBMC{}
	g.Eventually(func(g Gomega) {
		g.Expect(attacker.Client.Get(t.Context(), client.ObjectKey{Namespace: attacker.NS, Name: "grab"}, got)).To(Succeed())
		c := meta.FindStatusCondition(got.Status.Conditions, bmcv1alpha1.ReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(bmcv1alpha1.MachineNotFoundReason))
		g.Expect(c.Message).To(ContainSubstring("target"))
		c = meta.FindStatusCondition(got.Status.Conditions, bmcv1alpha1.SecretAvailableCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(bmcv1alpha1.SecretNotFoundReason))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(got.Status.IPMIEndpoint).To(BeEmpty(), "no BMC serves a Machine of another namespace")
	g.Expect(got.Status.RedfishEndpoint).To(BeEmpty())
	g.Consistently(func(g Gomega) {
		g.Expect(victim.Client.Get(t.Context(), client.ObjectKeyFromObject(vm), vm)).To(Succeed())
		g.Expect(vm.Spec.PowerState).To(Equal(machinev1alpha1.PowerOn), "the victim's Machine was not written to")
	}).WithTimeout(2 * time.Second).Should(Succeed())
}

// Unauthenticated IPMI commands (IPMI v1.5 framing with authentication
// NONE, RMCP+ without a session) get no answer and change nothing; only
// Get Channel Authentication Capabilities is answered before a session.
func TestBMCIgnoresUnauthenticatedCommands(t *testing.T) {
	tn := newTenant(t)
	g := NewWithT(t)
	g.Expect(tn.Client.Create(t.Context(), &infrastructurev1alpha1.KwokMachine{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: "m"}})).To(Succeed())
	m := &machinev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: "m"},
		Spec: machinev1alpha1.MachineSpec{InfrastructureRef: machinev1alpha1.InfrastructureReference{
			APIVersion: infrastructurev1alpha1.GroupVersion.String(), Kind: "KwokMachine", Name: "m"}}}
	g.Expect(tn.Client.Create(t.Context(), m)).To(Succeed())
	g.Expect(tn.Client.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: "m"},
		StringData: map[string]string{"username": "admin", "password": "pw-12345"}})).To(Succeed())
	b := &bmcv1alpha1.MachineBMC{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: "m"}, Spec: bmcv1alpha1.MachineBMCSpec{
		MachineRef: bmcv1alpha1.LocalObjectReference{Name: "m"}, AuthSecretRef: bmcv1alpha1.LocalObjectReference{Name: "m"}}}
	g.Expect(tn.Client.Create(t.Context(), b)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(tn.Client.Get(t.Context(), client.ObjectKeyFromObject(b), b)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(b.Status.Conditions, bmcv1alpha1.ReadyCondition)).To(BeTrue())
	}).WithTimeout(30 * time.Second).Should(Succeed())

	conn, err := net.Dial("udp", b.Status.IPMIEndpoint)
	g.Expect(err).NotTo(HaveOccurred())
	defer conn.Close()
	msg := func(netFn, cmd byte, data ...byte) []byte {
		out := []byte{0x20, netFn << 2}
		out = append(out, -(out[0] + out[1]))
		body := append([]byte{0x81, 1 << 2, cmd}, data...)
		var sum byte
		for _, x := range body {
			sum += x
		}
		return append(append(out, body...), -sum)
	}
	v15 := func(m []byte) []byte {
		return append([]byte{6, 0, 0xff, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, byte(len(m))}, m...)
	}
	rmcpp := func(m []byte) []byte {
		return append([]byte{6, 0, 0xff, 7, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, byte(len(m)), 0}, m...)
	}
	powerOff := msg(0x00, 0x02, 0x00)
	for _, p := range [][]byte{v15(powerOff), rmcpp(powerOff), v15(msg(0x06, 0x01)), rmcpp(msg(0x00, 0x08, 5, 0x80, 0x04, 0, 0, 0))} {
		_, err := conn.Write(p)
		g.Expect(err).NotTo(HaveOccurred())
		_ = conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		buf := make([]byte, 512)
		n, err := conn.Read(buf)
		g.Expect(err).To(HaveOccurred(), "an unauthenticated command was answered: %x", buf[:n])
	}
	// Get Channel Authentication Capabilities is answered, and says: IPMI
	// v2.0 only, no anonymous login, no null user names.
	_, err = conn.Write(v15(msg(0x06, 0x38, 0x8e, 0x04)))
	g.Expect(err).NotTo(HaveOccurred())
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 512)
	n, err := conn.Read(buf)
	g.Expect(err).NotTo(HaveOccurred())
	rsp := buf[14:n]
	g.Expect(rsp[6]).To(Equal(byte(0)), "completion code")
	g.Expect(rsp[9]&0x07).To(Equal(byte(0x04)), "non-null user names only, no anonymous login")
	g.Expect(rsp[10]).To(Equal(byte(0x02)), "IPMI v2.0 only")

	g.Consistently(func(g Gomega) {
		g.Expect(tn.Client.Get(t.Context(), client.ObjectKeyFromObject(m), m)).To(Succeed())
		g.Expect(m.Spec.PowerState).To(Equal(machinev1alpha1.PowerOn))
		g.Expect(m.Spec.BootDevice).To(Equal(machinev1alpha1.BootDisk))
	}).WithTimeout(time.Second).Should(Succeed())
}

// A cluster-mode manager publishes each MachineBMC through a Service of
// spec.service.type with its own rights. A user who may create MachineBMCs
// but not Services cannot use that to open a NodePort or a load-balancer
// address: the webhook asks the API server (SubjectAccessReview) whether
// the requester may create Services in the namespace, on create and when
// the type changes. ClusterIP stays allowed; a tenant with the right may
// ask for a LoadBalancer.
func TestMachineBMCCannotExposeWithoutServiceRights(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	env.InstallTenantRoles(t)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bmc-operator"}}
	g.Expect(env.Client.Create(ctx, sa)).To(Succeed())
	g.Expect(env.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bmc-operator"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa.Name}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "converge-edit"}})).To(Succeed())
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + sa.Name}
	c, err := client.New(cfg, client.Options{Scheme: setup.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	newBMC := func(name string, typ bmcv1alpha1.ServiceType) *bmcv1alpha1.MachineBMC {
		return &bmcv1alpha1.MachineBMC{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: bmcv1alpha1.MachineBMCSpec{
			MachineRef: bmcv1alpha1.LocalObjectReference{Name: "m"}, AuthSecretRef: bmcv1alpha1.LocalObjectReference{Name: "m"},
			Service: bmcv1alpha1.ServiceSpec{Type: typ}}}
	}
	for _, typ := range []bmcv1alpha1.ServiceType{bmcv1alpha1.ServiceLoadBalancer, bmcv1alpha1.ServiceNodePort} {
		err := c.Create(ctx, newBMC("out", typ))
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%s: %v", typ, err)
		g.Expect(err.Error()).To(And(ContainSubstring("spec.service.type"), ContainSubstring("may not create Services")))
	}
	in := newBMC("in", bmcv1alpha1.ServiceClusterIP)
	g.Expect(c.Create(ctx, in)).To(Succeed(), "ClusterIP needs no right beyond the MachineBMC's")
	base := in.DeepCopy()
	in.Spec.Service.Type = bmcv1alpha1.ServiceLoadBalancer
	err = c.Patch(ctx, in, client.MergeFrom(base))
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "changing the type to LoadBalancer: %v", err)

	tn := newTenant(t) // may create Services in its namespace
	b := newBMC("out", bmcv1alpha1.ServiceLoadBalancer)
	b.Namespace = tn.NS
	g.Expect(tn.Client.Create(ctx, b)).To(Succeed())
}

// TestBMCRefusesAWeakPassword: a BMC opens a Machine's power to the network,
// so a tenant's MachineBMC whose Secret holds a one-character password is
// never served: SecretInvalid names the bound, and no endpoint is published
// (nothing listens). A password of the minimum length is served.
func TestBMCRefusesAWeakPassword(t *testing.T) {
	tn := newTenant(t)
	g := NewWithT(t)
	ctx := t.Context()
	g.Expect(tn.Client.Create(ctx, &infrastructurev1alpha1.KwokMachine{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: "m"}})).To(Succeed())
	g.Expect(tn.Client.Create(ctx, &machinev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: "m"},
		Spec: machinev1alpha1.MachineSpec{InfrastructureRef: machinev1alpha1.InfrastructureReference{
			APIVersion: infrastructurev1alpha1.GroupVersion.String(), Kind: "KwokMachine", Name: "m"}}})).To(Succeed())
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: "m"},
		StringData: map[string]string{"username": "admin", "password": "x"}}
	g.Expect(tn.Client.Create(ctx, sec)).To(Succeed())
	b := &bmcv1alpha1.MachineBMC{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: "m"}, Spec: bmcv1alpha1.MachineBMCSpec{
		MachineRef: bmcv1alpha1.LocalObjectReference{Name: "m"}, AuthSecretRef: bmcv1alpha1.LocalObjectReference{Name: "m"}}}
	g.Expect(tn.Client.Create(ctx, b)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(tn.Client.Get(ctx, client.ObjectKeyFromObject(b), b)).To(Succeed())
		c := testenv.HasCondition(g, b.Status.Conditions, bmcv1alpha1.ReadyCondition, metav1.ConditionFalse, bmcv1alpha1.SecretInvalidReason)
		g.Expect(c.Message).To(ContainSubstring("password is shorter than 8 bytes"))
		g.Expect(c.ObservedGeneration).To(Equal(b.Generation))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(b.Status.IPMIEndpoint).To(BeEmpty(), "a BMC with a one-character password was published")
	g.Expect(b.Status.RedfishEndpoint).To(BeEmpty())

	sec.StringData = map[string]string{"password": "8-chars!"}
	g.Expect(tn.Client.Update(ctx, sec)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(tn.Client.Get(ctx, client.ObjectKeyFromObject(b), b)).To(Succeed())
		testenv.HasCondition(g, b.Status.Conditions, bmcv1alpha1.ReadyCondition, metav1.ConditionTrue, bmcv1alpha1.ServingReason)
	}).WithTimeout(30 * time.Second).Should(Succeed())
}
