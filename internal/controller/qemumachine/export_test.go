package qemumachine

import "context"

// LiveAgents exposes liveAgents to the tests.
func (s *Scheduler) LiveAgents(ctx context.Context) (map[string]bool, error) {
	return s.liveAgents(ctx)
}
