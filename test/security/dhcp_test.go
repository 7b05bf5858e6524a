package security

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dhcpv1alpha1 "github.com/converge-dev/converge/api/dhcp/v1alpha1"
)

// A tenant cannot take an address from another namespace's pool: not by
// naming the network the victim's pool serves, not by asking for the
// victim's address as a static one, not with the victim's MAC address; its
// configs look up pools in its own namespace only. It cannot make pools
// either (an IPPool puts a server address on a host-wide bridge): IPPools
// are read-only for tenants.
func TestMachineNetworkConfigCannotReachAnotherNamespace(t *testing.T) {
	victim, attacker := newTenant(t), newTenant(t)
	g := NewWithT(t)
	ctx := t.Context()
	pool := &dhcpv1alpha1.IPPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: victim.NS, Name: "lan"},
		Spec: dhcpv1alpha1.IPPoolSpec{NetworkName: "seclan", IPv4Config: dhcpv1alpha1.IPv4Config{
			CIDR: "10.123.0.0/24", ServerIP: "10.123.0.2",
			Pool: dhcpv1alpha1.AddressRange{Start: "10.123.0.10", End: "10.123.0.20"},
		}},
	}
	// The admin makes the victim's pool; the victim cannot.
	err := victim.Client.Create(ctx, pool.DeepCopy())
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a tenant created an IPPool: %v", err)
	g.Expect(env.Client.Create(ctx, pool)).To(Succeed())
	mine := &dhcpv1alpha1.MachineNetworkConfig{
		ObjectMeta: metav1.ObjectMeta{Namespace: victim.NS, Name: "vm"},
		Spec: dhcpv1alpha1.MachineNetworkConfigSpec{NetworkConfigs: []dhcpv1alpha1.NetworkConfig{
			{NetworkName: "seclan", MACAddress: "02:00:00:12:30:01", IPAddress: "10.123.0.15"},
		}},
	}
	g.Expect(victim.Client.Create(ctx, mine)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(victim.Client.Get(ctx, client.ObjectKeyFromObject(mine), mine)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(mine.Status.Conditions, dhcpv1alpha1.ReadyCondition)).To(BeTrue())
	}).WithTimeout(30 * time.Second).Should(Succeed())

	for i, nc := range []dhcpv1alpha1.NetworkConfig{
		{NetworkName: "seclan", MACAddress: "02:00:00:12:30:02"},
		{NetworkName: "seclan", MACAddress: "02:00:00:12:30:03", IPAddress: "10.123.0.15"},
		{NetworkName: "seclan", MACAddress: "02:00:00:12:30:01"},
	} {
		grab := &dhcpv1alpha1.MachineNetworkConfig{
			ObjectMeta: metav1.ObjectMeta{Namespace: attacker.NS, Name: "grab" + string(rune('a'+i))},
			Spec:       dhcpv1alpha1.MachineNetworkConfigSpec{NetworkConfigs: []dhcpv1alpha1.NetworkConfig{nc}},
		}
		g.Expect(attacker.Client.Create(ctx, grab)).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(attacker.Client.Get(ctx, client.ObjectKeyFromObject(grab), grab)).To(Succeed())
			c := meta.FindStatusCondition(grab.Status.Conditions, dhcpv1alpha1.ReadyCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(dhcpv1alpha1.PoolNotFoundReason))
			g.Expect(c.Message).To(ContainSubstring(attacker.NS))
		}).WithTimeout(30 * time.Second).Should(Succeed())
	}
	g.Consistently(func(g Gomega) {
		p := &dhcpv1alpha1.IPPool{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pool), p)).To(Succeed())
		g.Expect(p.Status.IPv4.Allocated).To(HaveLen(1))
		g.Expect(p.Status.IPv4.Allocated[0].Owner).To(Equal("vm"))
		g.Expect(p.Status.IPv4.Allocated[0].MACAddress).To(Equal("02:00:00:12:30:01"))
	}).WithTimeout(2 * time.Second).Should(Succeed())
}

// TestIPPoolWebhookAnswersFromTheCache: 100 AdmissionReviews for an IPPool
// overlapping another namespace's pool of the same network, posted straight
// to the webhook port, are refused from the manager's cache: the API server
// counts no LIST of IPPools per review.
func TestIPPoolWebhookAnswersFromTheCache(t *testing.T) {
	a, b := newTenant(t), newTenant(t)
	g := NewWithT(t)
	ctx := t.Context()
	spec := dhcpv1alpha1.IPPoolSpec{NetworkName: "secreads", IPv4Config: dhcpv1alpha1.IPv4Config{
		CIDR: "10.126.0.0/24", ServerIP: "10.126.0.2",
		Pool: dhcpv1alpha1.AddressRange{Start: "10.126.0.10", End: "10.126.0.20"},
	}}
	g.Expect(env.Client.Create(ctx, &dhcpv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Namespace: a.NS, Name: "lan"}, Spec: spec})).To(Succeed())
	flood := &dhcpv1alpha1.IPPool{TypeMeta: metav1.TypeMeta{APIVersion: dhcpv1alpha1.GroupVersion.String(), Kind: "IPPool"},
		ObjectMeta: metav1.ObjectMeta{Namespace: b.NS, Name: "lan"}, Spec: spec}
	gvk := metav1.GroupVersionKind{Group: dhcpv1alpha1.GroupVersion.Group, Version: dhcpv1alpha1.GroupVersion.Version, Kind: "IPPool"}
	const path = "/validate-dhcp-converge-dev-v1alpha1-ippool"
	g.Eventually(func() int { return postReviews(t, path, gvk, "ippools", flood, 1) }).
		WithTimeout(10 * time.Second).Should(BeZero())
	before := apiRequests(t, []string{"ippools"}, "LIST")
	g.Expect(postReviews(t, path, gvk, "ippools", flood, 100)).To(BeZero(), "an overlapping pool was allowed")
	after := apiRequests(t, []string{"ippools"}, "LIST")
	g.Expect(after-before).To(BeNumerically("<", 5), "100 AdmissionReviews cost %v LISTs of IPPools", after-before)
}

// macPool is an admin-made IPPool of network in ns: prefix.0/24, range
// .10-.20, excluding exclude.
func macPool(ns, network, prefix string, exclude ...string) *dhcpv1alpha1.IPPool {
	return &dhcpv1alpha1.IPPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lan"},
		Spec: dhcpv1alpha1.IPPoolSpec{NetworkName: network, IPv4Config: dhcpv1alpha1.IPv4Config{
			CIDR: prefix + ".0/24", ServerIP: prefix + ".2",
			Pool: dhcpv1alpha1.AddressRange{Start: prefix + ".10", End: prefix + ".20", Exclude: exclude},
		}},
	}
}

func oneNIC(ns, name, network, mac, ip string) *dhcpv1alpha1.MachineNetworkConfig {
	return &dhcpv1alpha1.MachineNetworkConfig{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: dhcpv1alpha1.MachineNetworkConfigSpec{NetworkConfigs: []dhcpv1alpha1.NetworkConfig{
			{NetworkName: network, MACAddress: mac, IPAddress: ip}}},
	}
}

// TestMACAddressStaysWithTheFirstNamespace: two namespaces the admin gave
// pools of one shared network. The attacker names the victim's MAC address
// in its own MachineNetworkConfig, to have the DHCP agent answer the
// victim's NIC with the attacker's lease (and network-boot it with the
// attacker's image): refused, MACAddressClaimed, naming neither the victim
// nor its address; nothing is recorded in the attacker's pool, and the
// victim's allocation is untouched. Deleting and re-creating the claim
// changes nothing.
func TestMACAddressStaysWithTheFirstNamespace(t *testing.T) {
	victim, attacker := newTenant(t), newTenant(t)
	g := NewWithT(t)
	ctx := t.Context()
	const network, mac = "secmac", "02:00:00:12:70:01"
	vpool, apool := macPool(victim.NS, network, "10.127.0"), macPool(attacker.NS, network, "10.127.1")
	g.Expect(env.Client.Create(ctx, vpool)).To(Succeed())
	g.Expect(env.Client.Create(ctx, apool)).To(Succeed())
	mine := oneNIC(victim.NS, "vm", network, mac, "")
	g.Expect(victim.Client.Create(ctx, mine)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(victim.Client.Get(ctx, client.ObjectKeyFromObject(mine), mine)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(mine.Status.Conditions, dhcpv1alpha1.ReadyCondition)).To(BeTrue())
	}).WithTimeout(30 * time.Second).Should(Succeed())
	victimIP := mine.Status.NetworkConfigs[0].AllocatedIPAddress

	for round := range 2 {
		grab := oneNIC(attacker.NS, "grab", network, mac, "")
		g.Expect(attacker.Client.Create(ctx, grab)).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(attacker.Client.Get(ctx, client.ObjectKeyFromObject(grab), grab)).To(Succeed())
			c := meta.FindStatusCondition(grab.Status.Conditions, dhcpv1alpha1.ReadyCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(dhcpv1alpha1.MACAddressClaimedReason))
			g.Expect(c.Message).To(And(ContainSubstring(mac), ContainSubstring(network), ContainSubstring("another namespace")))
			g.Expect(c.Message).NotTo(Or(ContainSubstring(victim.NS), ContainSubstring(victimIP)))
		}).WithTimeout(30*time.Second).Should(Succeed(), "round %d", round)
		g.Consistently(func(g Gomega) {
			p := &dhcpv1alpha1.IPPool{}
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(apool), p)).To(Succeed())
			g.Expect(p.Status.IPv4.Allocated).To(BeEmpty(), "the attacker's pool recorded the victim's MAC address")
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(vpool), p)).To(Succeed())
			g.Expect(p.Status.IPv4.Allocated).To(HaveLen(1))
			g.Expect(p.Status.IPv4.Allocated[0]).To(And(
				HaveField("MACAddress", mac), HaveField("IP", victimIP), HaveField("Owner", "vm"), HaveField("ClaimedAt", Not(BeNil()))))
		}).WithTimeout(2 * time.Second).Should(Succeed())
		g.Expect(attacker.Client.Delete(ctx, grab)).To(Succeed())
		g.Eventually(func() bool {
			return apierrors.IsNotFound(attacker.Client.Get(ctx, client.ObjectKeyFromObject(grab), grab))
		}).WithTimeout(30 * time.Second).Should(BeTrue())
	}
	g.Expect(victim.Client.Get(ctx, client.ObjectKeyFromObject(mine), mine)).To(Succeed())
	g.Expect(meta.IsStatusConditionTrue(mine.Status.Conditions, dhcpv1alpha1.ReadyCondition)).To(BeTrue())
	g.Expect(mine.Status.NetworkConfigs[0].AllocatedIPAddress).To(Equal(victimIP))
}

// TestStaticAddressCannotTakeAnExcludedOne: an address the admin excluded
// from the tenant's pool is refused as a static ipAddress at admission,
// naming the field; one excluded after it was allocated is released, and
// the config says why (AddressUnavailable, naming the exclusion).
func TestStaticAddressCannotTakeAnExcludedOne(t *testing.T) {
	tn := newTenant(t)
	g := NewWithT(t)
	ctx := t.Context()
	const network = "secexcl"
	pool := macPool(tn.NS, network, "10.127.2", "10.127.2.15")
	g.Expect(env.Client.Create(ctx, pool)).To(Succeed())
	// The webhook reads pools from the cache: give it the moment to see it.
	g.Eventually(func() string {
		err := tn.Client.Create(ctx, oneNIC(tn.NS, "excluded", network, "02:00:00:12:71:01", "10.127.2.15"))
		if err == nil {
			return "created"
		}
		return err.Error()
	}).WithTimeout(10 * time.Second).Should(And(
		ContainSubstring("spec.networkConfigs[0].ipAddress"), ContainSubstring("excluded")))

	kept := oneNIC(tn.NS, "kept", network, "02:00:00:12:71:02", "10.127.2.16")
	g.Expect(tn.Client.Create(ctx, kept)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(tn.Client.Get(ctx, client.ObjectKeyFromObject(kept), kept)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(kept.Status.Conditions, dhcpv1alpha1.ReadyCondition)).To(BeTrue())
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pool), pool)).To(Succeed())
	pool.Spec.IPv4Config.Pool.Exclude = append(pool.Spec.IPv4Config.Pool.Exclude, "10.127.2.16")
	g.Expect(env.Client.Update(ctx, pool)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(tn.Client.Get(ctx, client.ObjectKeyFromObject(kept), kept)).To(Succeed())
		c := meta.FindStatusCondition(kept.Status.Conditions, dhcpv1alpha1.ReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(dhcpv1alpha1.AddressUnavailableReason))
		g.Expect(c.Message).To(ContainSubstring("10.127.2.16 is excluded"))
		p := &dhcpv1alpha1.IPPool{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pool), p)).To(Succeed())
		g.Expect(p.Status.IPv4.Allocated).To(BeEmpty())
	}).WithTimeout(30 * time.Second).Should(Succeed())
	// Its finalizer still comes off: the config can be deleted.
	g.Expect(tn.Client.Delete(ctx, kept)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(tn.Client.Get(ctx, client.ObjectKeyFromObject(kept), kept))
	}).WithTimeout(30 * time.Second).Should(BeTrue())
}
