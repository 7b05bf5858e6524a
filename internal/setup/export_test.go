package setup

import (
	"time"

	"k8s.io/client-go/rest"
)

// FenceConfig exposes fenceConfig to the external tests.
func FenceConfig(cfg *rest.Config, f *Fence) { fenceConfig(cfg, f) }

// Renewed exposes renewed to the external tests.
func (f *Fence) Renewed(t time.Time) { f.renewed(t) }
