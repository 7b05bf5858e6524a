package dhcpagent

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Elector exposes the standalone agent's Lease election to the tests.
type Elector struct{ e *elector }

// NewElector is the election of id for Lease key, through c.
func NewElector(c client.Client, key client.ObjectKey, id string, duration time.Duration) *Elector {
	return &Elector{e: &elector{c: c, key: key, id: id, duration: duration, log: logr.Discard()}}
}

// Step is one renewal or contention at now; it reports whether id leads.
func (x *Elector) Step(ctx context.Context, now time.Time) bool { return x.e.step(ctx, now) }

// Release clears the holder if id holds the Lease.
func (x *Elector) Release(ctx context.Context) { x.e.release(ctx) }

// SetClient swaps the client (an unreachable API server).
func (x *Elector) SetClient(c client.Client) { x.e.c = c }
