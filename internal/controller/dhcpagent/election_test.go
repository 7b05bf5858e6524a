package dhcpagent_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/internal/controller/dhcpagent"
	"github.com/converge-dev/converge/internal/testenv"
)

// The Lease election of the standalone agent on a real API server, with
// a synthetic clock: one holder; a standby waits while the holder renews,
// takes over once it saw no renewal for the Lease's duration, and at once
// after a release; the old holder steps down when it sees the new one; a
// holder that cannot reach the API server keeps leading (it serves from
// its cache), a standby in that state stays a standby.
func TestLeaseElection(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	key := client.ObjectKey{Namespace: ns, Name: dhcpagent.LeaseName("elect")}
	const d = 10 * time.Second
	a := dhcpagent.NewElector(env.Client, key, "a", d)
	b := dhcpagent.NewElector(env.Client, key, "b", d)
	t0 := time.Now()

	g.Expect(a.Step(ctx, t0)).To(BeTrue(), "the first agent creates the Lease")
	g.Expect(b.Step(ctx, t0)).To(BeFalse())
	for i := 1; i <= 5; i++ { // a renews every 3 s; b sees each renewal
		now := t0.Add(time.Duration(i) * 3 * time.Second)
		g.Expect(a.Step(ctx, now)).To(BeTrue())
		g.Expect(b.Step(ctx, now)).To(BeFalse(), "standby took a renewed Lease at +%s", now.Sub(t0))
	}
	// a stops renewing: b waits the Lease's duration from the last
	// renewal it saw, then takes over; a steps down when it looks again.
	last := t0.Add(15 * time.Second)
	g.Expect(b.Step(ctx, last.Add(d-time.Second))).To(BeFalse())
	g.Expect(b.Step(ctx, last.Add(d+time.Second))).To(BeTrue(), "standby did not take an expired Lease")
	g.Expect(a.Step(ctx, last.Add(d+2*time.Second))).To(BeFalse(), "the old holder did not step down")

	// A release hands over at the next step, long before expiry.
	now := last.Add(d + 3*time.Second)
	g.Expect(b.Step(ctx, now)).To(BeTrue())
	g.Expect(a.Step(ctx, now)).To(BeFalse())
	b.Release(ctx)
	g.Expect(a.Step(ctx, now.Add(time.Second))).To(BeTrue(), "a released Lease was not taken at once")
	g.Expect(b.Step(ctx, now.Add(time.Second))).To(BeFalse())

	// The API server unreachable: the holder keeps leading, the standby
	// stays one.
	away, err := client.New(&rest.Config{Host: "http://127.0.0.1:1", Timeout: 500 * time.Millisecond}, client.Options{Scheme: env.Client.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	a.SetClient(away)
	b.SetClient(away)
	g.Expect(a.Step(ctx, now.Add(time.Minute))).To(BeTrue(), "the holder stopped leading when the API server went away")
	g.Expect(b.Step(ctx, now.Add(time.Minute))).To(BeFalse())
}
