package setup_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/internal/eventgate"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestEventsWaitInABoundedQueue: a burst of Events faster than the
// manager's budget waits in the event gate's queue, not in a goroutine per
// Event (client-go's recorder starts one for each, parked on the rate
// limiter); the Events that reach the API server are the ones emitted, in
// full (regarding and related objects, reason, action, type, formatted
// note, reporting controller), and repeated ones still become a series.
func TestEventsWaitInABoundedQueue(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	// The manager's budget (and so the Events' sink): 2 QPS.
	cv := newUnstartedManager(t, []string{"issuer"}, map[string]float32{"": 2}, map[string]int{"": 2})
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cv.Manager.Start(mctx) }()
	t.Cleanup(func() { cancel(); <-done })

	ns := env.NewNamespace(t)
	regarding := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "regarding"}}
	related := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "related"}}
	for _, o := range []client.Object{regarding, related} {
		g.Expect(env.Client.Create(ctx, o)).To(Succeed())
	}
	rec := cv.EventRecorder("events-test")
	rec.Eventf(regarding, related, corev1.EventTypeWarning, "Full", "Check", "note with %d%% and %s", 50, "an argument")
	rec.Eventf(regarding, nil, corev1.EventTypeNormal, "Twice", "Check", "the same Event")
	rec.Eventf(regarding, nil, corev1.EventTypeNormal, "Twice", "Check", "the same Event")

	// 300 more Events at 2 QPS take 150 s to send: client-go would park
	// about 300 goroutines meanwhile.
	before := runtime.NumGoroutine()
	for i := range 300 {
		rec.Eventf(regarding, nil, corev1.EventTypeNormal, fmt.Sprintf("Burst%d", i), "Check", "burst %d", i)
	}
	time.Sleep(time.Second) // what client-go would start, it starts at once
	g.Expect(runtime.NumGoroutine()-before).To(BeNumerically("<", 100), "a goroutine per queued Event")

	events := func(g Gomega) map[string]eventsv1.Event {
		l := &eventsv1.EventList{}
		g.Expect(env.Client.List(ctx, l, client.InNamespace(ns))).To(Succeed())
		out := map[string]eventsv1.Event{}
		for _, e := range l.Items {
			out[e.Reason] = e
		}
		return out
	}
	g.Eventually(func(g Gomega) {
		full, ok := events(g)["Full"]
		g.Expect(ok).To(BeTrue())
		g.Expect(full.Type).To(Equal(corev1.EventTypeWarning))
		g.Expect(full.Action).To(Equal("Check"))
		g.Expect(full.Note).To(Equal("note with 50% and an argument"))
		g.Expect(full.ReportingController).To(Equal("events-test"))
		g.Expect(full.Regarding.Kind).To(Equal("ConfigMap"))
		g.Expect(full.Regarding.Name).To(Equal("regarding"))
		g.Expect(full.Regarding.UID).To(Equal(regarding.UID))
		g.Expect(full.Related).NotTo(BeNil())
		g.Expect(full.Related.Name).To(Equal("related"))
		g.Expect(full.Related.UID).To(Equal(related.UID))
	}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	// client-go retries a series patch that raced the first create after
	// 10 s (±25 %).
	g.Eventually(func(g Gomega) {
		twice, ok := events(g)["Twice"]
		g.Expect(ok).To(BeTrue())
		g.Expect(twice.Series).NotTo(BeNil())
		g.Expect(twice.Series.Count).To(BeEquivalentTo(2))
	}).WithTimeout(60 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	g.Expect(cv.DroppedEvents()).To(BeZero())
}

// TestEventsBeyondTheQueueAreDropped: Eventf never blocks; with nobody
// draining the queue (a manager not started), the Events beyond
// EventQueueLength are dropped and counted.
func TestEventsBeyondTheQueueAreDropped(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	cv := newUnstartedManager(t, []string{"issuer"}, nil, nil)
	rec := cv.EventRecorder("events-test")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cm", UID: "u"}}
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for i := range eventgate.QueueLength + 10 {
			rec.Eventf(cm, nil, corev1.EventTypeNormal, "Queued", "Check", "event %d", i)
		}
	}()
	g.Eventually(sent).WithTimeout(30*time.Second).Should(BeClosed(), "Eventf blocked")
	g.Expect(cv.DroppedEvents()).To(BeEquivalentTo(10))
}
