// Package apibudget is the client-side API budget of a Converge
// controller: a token bucket its every request draws on (Budget), the
// rest.Config that carries it, and the --kube-api-qps / --kube-api-burst
// flags. The per-controller defaults are a row of the wiring table
// (internal/setup); this package knows no controller.
package apibudget

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Budget is a client-side limit on the API requests of one controller: a
// token bucket of Burst tokens refilled at QPS tokens per second, shared by
// every request the controller makes (all kinds, cached client, API reader,
// and clients derived from its rest.Config, such as impersonating ones). A
// QPS below zero turns the client-side limit off, leaving the sharing to
// the API server's Priority and Fairness.
type Budget struct {
	QPS   float32
	Burst int
}

// Unlimited returns whether the budget turns the client-side limit off.
func (b Budget) Unlimited() bool { return b.QPS < 0 }

// String is the budget as --help and errors say it.
func (b Budget) String() string {
	if b.Unlimited() {
		return "unlimited"
	}
	return fmt.Sprintf("%s QPS, burst %d", strconv.FormatFloat(float64(b.QPS), 'f', -1, 32), b.Burst)
}

// Manager is the default budget of the manager's own clients (the shared
// informers' list and watch, events, leader election, the webhook
// certificate, the push receiver): kube-controller-manager's defaults.
var Manager = Budget{QPS: 20, Burst: 30}

// RESTConfig is cfg with the budget's rate limiter (a new token bucket,
// shared by everything built from the returned config or a copy of it) and
// the User-Agent.
func RESTConfig(cfg *rest.Config, b Budget, userAgent string) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = userAgent
	cfg.QPS, cfg.Burst = b.QPS, b.Burst
	cfg.RateLimiter = nil
	if !b.Unlimited() {
		cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(b.QPS, b.Burst)
	}
	return cfg
}

// QPSFlag is the pflag.Value of --kube-api-qps: "N" sets the default of
// every controller and of the manager's own clients, "name=N" one
// controller's (a name known lists); comma separated and repeatable.
func QPSFlag(m *map[string]float32, known func() []string) pflag.Value {
	return &budgetFlag[float32]{flag: "--kube-api-qps", m: m, known: known, parse: func(s string) (float32, error) {
		f, err := strconv.ParseFloat(s, 32)
		return float32(f), err
	}}
}

// BurstFlag is the pflag.Value of --kube-api-burst, as QPSFlag.
func BurstFlag(m *map[string]int, known func() []string) pflag.Value {
	return &budgetFlag[int]{flag: "--kube-api-burst", m: m, known: known, parse: strconv.Atoi}
}

type budgetFlag[T float32 | int] struct {
	flag  string
	m     *map[string]T
	known func() []string
	parse func(string) (T, error)
}

// Set implements pflag.Value.
func (f *budgetFlag[T]) Set(s string) error {
	if *f.m == nil {
		*f.m = map[string]T{}
	}
	known := f.known()
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, val, named := strings.Cut(part, "=")
		if !named {
			name, val = "", part
		}
		name = strings.TrimSpace(name)
		if named && !slices.Contains(known, name) {
			return fmt.Errorf("%s: unknown controller %q (known: %s)", f.flag, name, strings.Join(known, ", "))
		}
		v, err := f.parse(strings.TrimSpace(val))
		if err != nil {
			return fmt.Errorf("%s: %q is not a number: %w", f.flag, part, err)
		}
		(*f.m)[name] = v
	}
	return nil
}

// String implements pflag.Value.
func (f *budgetFlag[T]) String() string {
	keys := slices.Sorted(maps.Keys(*f.m))
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		if k == "" {
			out = append(out, fmt.Sprint((*f.m)[k]))
		} else {
			out = append(out, fmt.Sprintf("%s=%v", k, (*f.m)[k]))
		}
	}
	return strings.Join(out, ",")
}

// Type implements pflag.Value.
func (f *budgetFlag[T]) Type() string { return "[name=]N" }
