package testenv

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/converge-dev/converge/internal/setup"
)

// StartManager runs one more manager against the environment, built by
// setup as `converge run` builds it: metrics, probes, webhooks and the push
// receiver off (the suite's manager serves admission and push webhooks), 5 s
// graceful shutdown. adjust picks its controllers, shard key and the like;
// give it a ShardKey so that it does not compete with the suite's manager. The returned stop cancels it abruptly,
// waits until it has stopped and returns its error (nil when it stopped
// because of the cancel); it also runs at the end of the test.
func (e *Environment) StartManager(t testing.TB, adjust func(*setup.Options)) (stop func() error) {
	t.Helper()
	_, stop = e.StartConverge(t, adjust, nil)
	return stop
}

// StartConverge is StartManager that also hands the test what setup.New
// built; before, when not nil, runs on it before the manager starts (to add
// a runnable that tells the test the manager is running, say).
func (e *Environment) StartConverge(t testing.TB, adjust func(*setup.Options), before func(*setup.Converge) error) (cv *setup.Converge, stop func() error) {
	t.Helper()
	o := setup.DefaultOptions()
	o.MetricsBindAddress, o.HealthProbeBindAddress, o.SecureMetrics = "0", "0", false
	o.Webhook.Disabled = true
	o.Receiver.BindAddress = "0"
	o.SkipControllerNameValidation = true
	o.GracefulShutdownTimeout = 5 * time.Second
	if adjust != nil {
		adjust(&o)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	cv, err := setup.New(ctx, e.Config, o)
	if err != nil {
		cancel()
		t.Fatalf("building a manager: %v", err)
	}
	if before != nil {
		if err := before(cv); err != nil {
			cancel()
			t.Fatalf("preparing the manager: %v", err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- cv.Manager.Start(ctx) }()
	var stopped bool
	var result error
	stop = func() error {
		if stopped {
			return result
		}
		stopped = true
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			result = err
		}
		return result
	}
	t.Cleanup(func() { _ = stop() })
	return cv, stop
}
