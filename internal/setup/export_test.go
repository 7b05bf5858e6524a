package setup

import (
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

// EventRecorder is the recorder a controller named name gets from the
// manager (behind the event gate).
func (c *Converge) EventRecorder(name string) recorder.EventRecorder {
	return (&controllerManager{Manager: c.Manager, events: c.events}).GetEventRecorder(name)
}

// DroppedEvents exposes the event gate's count of dropped Events.
func (c *Converge) DroppedEvents() int64 { return c.events.DroppedEvents() }
