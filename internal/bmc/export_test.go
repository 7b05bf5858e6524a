package bmc

import (
	"context"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Cycle runs the BMC's power cycle of Machine key with c as the server's
// client, until ctx ends.
func Cycle(ctx context.Context, c client.Client, key types.NamespacedName) error {
	b := &machineBackend{srv: &Server{Client: c, Log: logr.Discard()}, key: key, ctx: ctx}
	return b.cycle(ctx)
}
