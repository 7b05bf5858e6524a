package lb_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	lbv1alpha1 "github.com/converge-dev/converge/api/lb/v1alpha1"
	webhooklb "github.com/converge-dev/converge/internal/webhook/lb"
)

func pool(name string, addresses ...string) *lbv1alpha1.IPAddressPool {
	return &lbv1alpha1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: lbv1alpha1.IPAddressPoolSpec{Addresses: addresses}}
}

func assigned(p *lbv1alpha1.IPAddressPool, addresses ...string) *lbv1alpha1.IPAddressPool {
	for _, a := range addresses {
		p.Status.Assignments = append(p.Status.Assignments, lbv1alpha1.Assignment{Address: a, Service: lbv1alpha1.ServiceRef{Namespace: "ns", Name: "web"}})
	}
	return p
}

// TestValidatePool: bad addresses and selectors are refused naming the
// field, before any other pool is listed (the webhook has no Reader here).
func TestValidatePool(t *testing.T) {
	badSelector := metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}}
	tests := []struct {
		name string
		pool *lbv1alpha1.IPAddressPool
		want string
	}{
		{"unparseable", pool("p", "192.0.2.0/33"), "spec.addresses: Invalid value"},
		{"bad namespace selector", func() *lbv1alpha1.IPAddressPool {
			p := pool("p", "192.0.2.0/28")
			p.Spec.ServiceAllocation = &lbv1alpha1.ServiceAllocation{NamespaceSelectors: []metav1.LabelSelector{{}, badSelector}}
			return p
		}(), "spec.serviceAllocation.namespaceSelectors[1]: Invalid value"},
		{"bad service selector", func() *lbv1alpha1.IPAddressPool {
			p := pool("p", "192.0.2.0/28")
			p.Spec.ServiceAllocation = &lbv1alpha1.ServiceAllocation{ServiceSelectors: []metav1.LabelSelector{badSelector}}
			return p
		}(), "spec.serviceAllocation.serviceSelectors[0]: Invalid value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := webhooklb.IPAddressPool{}.ValidateCreate(context.Background(), tt.pool)
			g.Expect(err).To(MatchError(ContainSubstring(tt.want)))
			_, err = webhooklb.IPAddressPool{}.ValidateUpdate(context.Background(), nil, tt.pool)
			g.Expect(err).To(MatchError(ContainSubstring(tt.want)))
		})
	}
}

// TestValidateAddresses: a pool shrinking past an assigned address and
// overlapping pools are refused naming spec.addresses; the pool itself,
// disjoint and unparseable pools are not counted.
func TestValidateAddresses(t *testing.T) {
	avoid := pool("p", "192.0.2.0/24")
	avoid.Spec.AvoidBuggyIPs = true
	tests := []struct {
		name     string
		pool     *lbv1alpha1.IPAddressPool
		existing []*lbv1alpha1.IPAddressPool
		want     string // empty: valid
	}{
		{"valid", pool("p", "192.0.2.0/28"), nil, ""},
		{"assigned address kept", assigned(pool("p", "192.0.2.0/28"), "192.0.2.5", "not an address"), nil, ""},
		{"assigned address dropped", assigned(pool("p", "192.0.2.0/28"), "192.0.2.20"), nil,
			`spec.addresses: Invalid value: ["192.0.2.0/28"]: would drop address 192.0.2.20 assigned to Service ns/web; move or delete that Service first`},
		{"assigned address now buggy", assigned(avoid, "192.0.2.0"), nil, "would drop address 192.0.2.0"},
		{"itself", pool("p", "192.0.2.0/28"), []*lbv1alpha1.IPAddressPool{pool("p", "192.0.2.0/28")}, ""},
		{"disjoint", pool("p", "192.0.2.0/28"), []*lbv1alpha1.IPAddressPool{pool("q", "192.0.2.16/28")}, ""},
		{"invalid stored pool", pool("p", "192.0.2.0/28"), []*lbv1alpha1.IPAddressPool{pool("q", "192.0.2.0/33")}, ""},
		{"overlap", pool("p", "192.0.2.0/28"), []*lbv1alpha1.IPAddressPool{pool("q", "192.0.2.10-192.0.2.20")}, `IPAddressPool "q"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			var existing []lbv1alpha1.IPAddressPool
			for _, o := range tt.existing {
				existing = append(existing, *o)
			}
			errs := webhooklb.ValidateAddresses(tt.pool, existing)
			if tt.want == "" {
				g.Expect(errs).To(BeEmpty())
				return
			}
			g.Expect(errs.ToAggregate()).To(MatchError(ContainSubstring(tt.want)))
		})
	}
}

// TestValidatePoolSpec: the spec alone; a valid one has no errors.
func TestValidatePoolSpec(t *testing.T) {
	g := NewWithT(t)
	spec := lbv1alpha1.IPAddressPoolSpec{Addresses: []string{"192.0.2.0/28"}, ServiceAllocation: &lbv1alpha1.ServiceAllocation{
		NamespaceSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"lb": "yes"}}}}}
	g.Expect(webhooklb.ValidatePoolSpec(&spec, field.NewPath("spec"))).To(BeEmpty())
}

// TestValidateL2Advertisement: node selectors must parse.
func TestValidateL2Advertisement(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	a := &lbv1alpha1.L2Advertisement{Spec: lbv1alpha1.L2AdvertisementSpec{NodeSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"lb": "yes"}}}}}
	_, err := webhooklb.L2Advertisement{}.ValidateCreate(ctx, a)
	g.Expect(err).NotTo(HaveOccurred())
	bad := a.DeepCopy()
	bad.Spec.NodeSelectors = append(bad.Spec.NodeSelectors, metav1.LabelSelector{MatchLabels: map[string]string{"a b": "c"}})
	_, err = webhooklb.L2Advertisement{}.ValidateUpdate(ctx, a, bad)
	g.Expect(err).To(MatchError(ContainSubstring("spec.nodeSelectors[1]: Invalid value")))
}
