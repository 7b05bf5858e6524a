package lb_test

import (
	"context"
	"net"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1alpha1 "github.com/converge-dev/converge/api/lb/v1alpha1"
	webhooklb "github.com/converge-dev/converge/internal/webhook/lb"
)

// TestPoolListFails: when the other pools cannot be listed (here a real
// client whose API server is gone) a valid pool is refused with an
// internal error, not admitted without its overlap check.
func TestPoolListFails(t *testing.T) {
	g := NewWithT(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	host := "http://" + l.Addr().String()
	g.Expect(l.Close()).To(Succeed())
	s := runtime.NewScheme()
	g.Expect(lbv1alpha1.AddToScheme(s)).To(Succeed())
	c, err := client.New(&rest.Config{Host: host}, client.Options{Scheme: s})
	g.Expect(err).NotTo(HaveOccurred())
	w := webhooklb.IPAddressPool{Reader: c}
	_, err = w.ValidateCreate(context.Background(), pool("p", "192.0.2.0/28"))
	g.Expect(err).To(MatchError(ContainSubstring("listing IPAddressPools: ")))
	g.Expect(err).To(MatchError(ContainSubstring("connection refused")))
	_, err = w.ValidateUpdate(context.Background(), nil, pool("p", "192.0.2.0/28"))
	g.Expect(err).To(MatchError(ContainSubstring("listing IPAddressPools: ")))
}
