package machineupgrade

import (
	"context"
	"net"
)

// DialBMC is the default HTTPClient's dialer (dialBMC), for the tests of
// the BMC CA pool.
func (r *Reconciler) DialBMC(ctx context.Context, network, addr string) (net.Conn, error) {
	return r.dialBMC(ctx, network, addr)
}
