package lb_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"

	lbv1alpha1 "github.com/converge-dev/converge/api/lb/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
	webhooklb "github.com/converge-dev/converge/internal/webhook/lb"
)

// TestPoolListFails: when the other pools cannot be listed (here a real
// client whose API server is gone) a valid pool is refused with an
// internal error, not admitted without its overlap check.
func TestPoolListFails(t *testing.T) {
	g := NewWithT(t)
	w := webhooklb.IPAddressPool{Reader: testenv.UnreachableClient(t, lbv1alpha1.AddToScheme)}
	_, err := w.ValidateCreate(context.Background(), pool("p", "192.0.2.0/28"))
	g.Expect(err).To(MatchError(ContainSubstring("listing IPAddressPools: ")))
	g.Expect(err).To(MatchError(ContainSubstring("connection refused")))
	_, err = w.ValidateUpdate(context.Background(), nil, pool("p", "192.0.2.0/28"))
	g.Expect(err).To(MatchError(ContainSubstring("listing IPAddressPools: ")))
}
