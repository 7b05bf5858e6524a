package lb_test

import (
	"context"
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

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

func reader(t *testing.T, objs ...client.Object) client.Reader {
	scheme := runtime.NewScheme()
	if err := lbv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
}

// TestValidatePool: bad addresses and selectors, a pool shrinking past an
// assigned address and overlapping pools are refused naming the field.
func TestValidatePool(t *testing.T) {
	badSelector := metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}}
	avoid := pool("p", "192.0.2.0/24")
	avoid.Spec.AvoidBuggyIPs = true
	tests := []struct {
		name     string
		pool     *lbv1alpha1.IPAddressPool
		existing []client.Object
		want     string // empty: valid
	}{
		{"valid", pool("p", "192.0.2.0/28"), nil, ""},
		{"unparseable", pool("p", "192.0.2.0/33"), nil, "spec.addresses: Invalid value"},
		{"bad namespace selector", func() *lbv1alpha1.IPAddressPool {
			p := pool("p", "192.0.2.0/28")
			p.Spec.ServiceAllocation = &lbv1alpha1.ServiceAllocation{NamespaceSelectors: []metav1.LabelSelector{{}, badSelector}}
			return p
		}(), nil, "spec.serviceAllocation.namespaceSelectors[1]: Invalid value"},
		{"bad service selector", func() *lbv1alpha1.IPAddressPool {
			p := pool("p", "192.0.2.0/28")
			p.Spec.ServiceAllocation = &lbv1alpha1.ServiceAllocation{ServiceSelectors: []metav1.LabelSelector{badSelector}}
			return p
		}(), nil, "spec.serviceAllocation.serviceSelectors[0]: Invalid value"},
		{"assigned address kept", assigned(pool("p", "192.0.2.0/28"), "192.0.2.5", "not an address"), nil, ""},
		{"assigned address dropped", assigned(pool("p", "192.0.2.0/28"), "192.0.2.20"), nil, "would drop address 192.0.2.20 assigned to Service ns/web"},
		{"assigned address now buggy", assigned(avoid, "192.0.2.0"), nil, "would drop address 192.0.2.0"},
		{"itself", pool("p", "192.0.2.0/28"), []client.Object{pool("p", "192.0.2.0/28")}, ""},
		{"disjoint", pool("p", "192.0.2.0/28"), []client.Object{pool("q", "192.0.2.16/28")}, ""},
		{"invalid stored pool", pool("p", "192.0.2.0/28"), []client.Object{pool("q", "192.0.2.0/33")}, ""},
		{"overlap", pool("p", "192.0.2.0/28"), []client.Object{pool("q", "192.0.2.10-192.0.2.20")}, `IPAddressPool "q"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			w := webhooklb.IPAddressPool{Reader: reader(t, tt.existing...)}
			_, err := w.ValidateCreate(context.Background(), tt.pool)
			if tt.want == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(tt.want)))
		})
	}
}

// TestValidatePoolListFails: a failed list is an internal error, not an
// admission.
func TestValidatePoolListFails(t *testing.T) {
	g := NewWithT(t)
	r := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			return errors.New("down")
		},
	}).Build()
	_, err := webhooklb.IPAddressPool{Reader: r}.ValidateUpdate(context.Background(), nil, pool("p", "192.0.2.0/28"))
	g.Expect(err).To(MatchError(ContainSubstring("listing IPAddressPools: down")))
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
