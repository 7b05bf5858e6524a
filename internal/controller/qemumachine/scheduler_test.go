package qemumachine_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/internal/controller/qemumachine"
	"github.com/converge-dev/converge/internal/testenv"
)

// An agent is alive while the scheduler sees its Lease's renewTime change
// within the Lease's duration, by the scheduler's own clock: a node whose
// clock runs an hour ahead looks fresh when first seen, and dead once it
// stops renewing, although its renewTime is still "in the future". A
// Lease already stale when first seen is dead; Leases without the agent
// label are not agents.
func TestSchedulerTimesHeartbeatsWithItsOwnClock(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	now := time.Now()
	lease := func(node string, renew time.Time, labelled bool) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: qemumachine.AgentLeaseName(node)},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), LeaseDurationSeconds: ptr.To(int32(3)),
				RenewTime: &metav1.MicroTime{Time: renew}}}
		if labelled {
			l.Labels = map[string]string{qemumachine.AgentLeaseLabel: "true"}
		}
		g.Expect(env.Client.Create(t.Context(), l)).To(Succeed())
		return l
	}
	lease("ahead", now.Add(time.Hour), true)
	fresh := lease("fresh", now, true)
	lease("stale", now.Add(-time.Hour), true)
	lease("other", now, false)
	clock := now
	s := &qemumachine.Scheduler{Reader: env.Client, LeaseNamespace: ns, Now: func() time.Time { return clock }}

	alive, err := s.LiveAgents(t.Context())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(alive).To(Equal(map[string]bool{"ahead": true, "fresh": true}))

	clock = clock.Add(4 * time.Second) // nobody renewed
	alive, err = s.LiveAgents(t.Context())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(alive).To(BeEmpty(), "a Lease not renewed for its duration is dead, whatever its renewTime says")

	base := fresh.DeepCopy()
	fresh.Spec.RenewTime = &metav1.MicroTime{Time: now.Add(time.Second)}
	g.Expect(env.Client.Patch(t.Context(), fresh, client.MergeFrom(base))).To(Succeed())
	alive, err = s.LiveAgents(t.Context())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(alive).To(Equal(map[string]bool{"fresh": true}), "renewed again")
}

// countingReader counts the List calls it passes to the API server.
type countingReader struct {
	client.Reader
	lists int
}

func (r *countingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	r.lists++
	return r.Reader.List(ctx, list, opts...)
}

// The Leases are listed at most about twice per check interval, however
// many QemuMachines ask.
func TestSchedulerListsLeasesOncePerHalfInterval(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	clock := time.Now()
	r := &countingReader{Reader: env.Client}
	s := &qemumachine.Scheduler{Reader: r, LeaseNamespace: ns, CheckInterval: 2 * time.Second, Now: func() time.Time { return clock }}
	for range 5 {
		_, err := s.LiveAgents(t.Context())
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(r.lists).To(Equal(1))
	clock = clock.Add(time.Second)
	_, err := s.LiveAgents(t.Context())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.lists).To(Equal(2))
}
