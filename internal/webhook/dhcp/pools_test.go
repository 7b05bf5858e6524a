package dhcp_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	dhcpv1alpha1 "github.com/converge-dev/converge/api/dhcp/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
	webhookdhcp "github.com/converge-dev/converge/internal/webhook/dhcp"
)

// lan is a valid pool of network "lan" on 10.0.0.0/24 (server .2, router
// .1, range .100-.200) that excludes 10.0.0.7.
func lan(name string) dhcpv1alpha1.IPPool {
	return dhcpv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: dhcpv1alpha1.IPPoolSpec{
		NetworkName: "lan", IPv4Config: dhcpv1alpha1.IPv4Config{
			CIDR: "10.0.0.0/24", ServerIP: "10.0.0.2", Router: "10.0.0.1",
			Pool: dhcpv1alpha1.AddressRange{Start: "10.0.0.100", End: "10.0.0.200", Exclude: []string{"10.0.0.7"}},
		}}}
}

// mnc is a MachineNetworkConfig asking for ip on network "lan".
func mnc(ip string) *dhcpv1alpha1.MachineNetworkConfig {
	return &dhcpv1alpha1.MachineNetworkConfig{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m"},
		Spec: dhcpv1alpha1.MachineNetworkConfigSpec{NetworkConfigs: []dhcpv1alpha1.NetworkConfig{
			{NetworkName: "lan", MACAddress: "02:00:00:00:00:01", IPAddress: ip}}}}
}

// TestStaticAllowed: a static address is refused, naming
// spec.networkConfigs[i].ipAddress and the pool, when the first pool of its
// network whose CIDR holds it does not give it out; pools of other
// networks, pools that do not parse and pools whose CIDR does not hold it
// are passed over, and a config without an address is not checked.
func TestStaticAllowed(t *testing.T) {
	other := lan("wan")
	other.Spec.NetworkName = "wan"
	other.Spec.IPv4Config.Pool.Exclude = []string{"10.0.0.5"}
	broken := lan("broken")
	broken.Spec.IPv4Config.CIDR = "10.0.0.1/24" // host bits: does not parse
	broken.Spec.IPv4Config.Pool.Exclude = []string{"10.0.0.5"}
	elsewhere := lan("elsewhere")
	elsewhere.Spec.IPv4Config = dhcpv1alpha1.IPv4Config{CIDR: "10.1.0.0/24", ServerIP: "10.1.0.2",
		Pool: dhcpv1alpha1.AddressRange{Start: "10.1.0.100", End: "10.1.0.200"}}
	allows := lan("allows") // holds 10.0.0.7 too, but comes after "lan"

	for _, c := range []struct {
		name  string
		ip    string
		pools []dhcpv1alpha1.IPPool
		want  string // empty: allowed
	}{
		{"no pool", "10.0.0.7", nil, ""},
		{"no address", "", []dhcpv1alpha1.IPPool{lan("lan")}, ""},
		{"given out", "10.0.0.5", []dhcpv1alpha1.IPPool{lan("lan")}, ""},
		{"excluded", "10.0.0.7", []dhcpv1alpha1.IPPool{lan("lan")},
			`spec.networkConfigs[0].ipAddress: Invalid value: "10.0.0.7": 10.0.0.7 is excluded from the pool (spec.ipv4Config.pool.exclude) in IPPool lan`},
		{"server", "10.0.0.2", []dhcpv1alpha1.IPPool{lan("lan")}, "10.0.0.2 is the DHCP server's address in IPPool lan"},
		{"router", "10.0.0.1", []dhcpv1alpha1.IPPool{lan("lan")}, "10.0.0.1 is the router's address in IPPool lan"},
		{"broadcast", "10.0.0.255", []dhcpv1alpha1.IPPool{lan("lan")}, "network or broadcast address"},
		{"other network excludes it", "10.0.0.5", []dhcpv1alpha1.IPPool{other}, ""},
		{"other network first", "10.0.0.7", []dhcpv1alpha1.IPPool{other, lan("lan")}, "in IPPool lan"},
		{"pool that does not parse", "10.0.0.5", []dhcpv1alpha1.IPPool{broken}, ""},
		{"pool that does not parse first", "10.0.0.7", []dhcpv1alpha1.IPPool{broken, lan("lan")}, "in IPPool lan"},
		{"cidr does not hold it", "10.0.0.5", []dhcpv1alpha1.IPPool{elsewhere}, ""},
		{"cidr does not hold it first", "10.0.0.7", []dhcpv1alpha1.IPPool{elsewhere, lan("lan")}, "in IPPool lan"},
		{"first holding pool decides", "10.0.0.7", []dhcpv1alpha1.IPPool{func() dhcpv1alpha1.IPPool {
			allows.Spec.IPv4Config.Pool.Exclude = nil
			return allows
		}(), lan("lan")}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			errs := webhookdhcp.StaticAllowed(&mnc(c.ip).Spec, c.pools, field.NewPath("spec"))
			if c.want == "" {
				g.Expect(errs).To(BeEmpty())
				return
			}
			g.Expect(errs).To(HaveLen(1))
			g.Expect(errs.ToAggregate().Error()).To(ContainSubstring(c.want))
			g.Expect(errs[0].Field).To(Equal("spec.networkConfigs[0].ipAddress"))
		})
	}
}

// TestPoolListFails: when the pools cannot be listed (a real client whose
// API server is gone) a valid IPPool or MachineNetworkConfig is refused with
// an internal error, not admitted without its overlap or static-address
// check; a spec that is invalid by itself is refused naming its field
// without listing anything.
func TestPoolListFails(t *testing.T) {
	g := NewWithT(t)
	reader := testenv.UnreachableClient(t, dhcpv1alpha1.AddToScheme)
	ctx := context.Background()

	p := lan("p")
	pw := webhookdhcp.IPPool{Reader: reader}
	_, err := pw.ValidateCreate(ctx, &p)
	g.Expect(apierrors.IsInternalError(err)).To(BeTrue(), "%v", err)
	g.Expect(err).To(MatchError(ContainSubstring("listing IPPools: ")))
	g.Expect(err).To(MatchError(ContainSubstring("connection refused")))
	_, err = pw.ValidateUpdate(ctx, &p, &p)
	g.Expect(err).To(MatchError(ContainSubstring("listing IPPools: ")))

	mw := webhookdhcp.MachineNetworkConfig{Reader: reader}
	_, err = mw.ValidateCreate(ctx, mnc("10.0.0.5"))
	g.Expect(apierrors.IsInternalError(err)).To(BeTrue(), "%v", err)
	g.Expect(err).To(MatchError(ContainSubstring("listing IPPools: ")))
	g.Expect(err).To(MatchError(ContainSubstring("connection refused")))

	// An invalid spec is refused for what it is, before any listing.
	bad := mnc("fd00::1")
	_, err = mw.ValidateCreate(ctx, bad)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
	g.Expect(err).To(MatchError(ContainSubstring("spec.networkConfigs[0].ipAddress")))
	g.Expect(err).NotTo(MatchError(ContainSubstring("listing IPPools")))
	// Without a Reader the spec alone is checked.
	_, err = webhookdhcp.MachineNetworkConfig{}.ValidateCreate(ctx, bad)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
	_, err = webhookdhcp.MachineNetworkConfig{}.ValidateCreate(ctx, mnc("10.0.0.7"))
	g.Expect(err).NotTo(HaveOccurred())
}

// TestMNCUpdateUnchangedSpec: an update that leaves the spec as it was
// (a finalizer or label change) does not consult the pools, so a stored
// config whose address a pool excluded since can still lose its finalizer;
// a changed spec, or an update without the old object, is checked against
// them. The Reader is a real client whose API server is gone: any listing
// fails, which tells the two paths apart.
func TestMNCUpdateUnchangedSpec(t *testing.T) {
	g := NewWithT(t)
	w := webhookdhcp.MachineNetworkConfig{Reader: testenv.UnreachableClient(t, dhcpv1alpha1.AddToScheme)}
	ctx := context.Background()

	old := mnc("10.0.0.7")
	m := old.DeepCopy()
	m.Finalizers = []string{"dhcp.converge.dev/allocation"}
	_, err := w.ValidateUpdate(ctx, old, m)
	g.Expect(err).NotTo(HaveOccurred())

	// The shortcut still checks the spec alone.
	bad := mnc("fd00::1")
	_, err = w.ValidateUpdate(ctx, bad, bad.DeepCopy())
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)

	changed := mnc("10.0.0.8")
	_, err = w.ValidateUpdate(ctx, old, changed)
	g.Expect(err).To(MatchError(ContainSubstring("listing IPPools: ")))
	_, err = w.ValidateUpdate(ctx, nil, m)
	g.Expect(err).To(MatchError(ContainSubstring("listing IPPools: ")))
}
