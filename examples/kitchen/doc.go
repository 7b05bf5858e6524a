// Package kitchen is the example of writing a controller on Converge's
// public reconcile kit, github.com/converge-dev/converge/pkg/reconcile (after
// rancher/wrangler's kitchen example): an Order (api/v1alpha1) asks for
// spec.sets Meals of spec.mealConfig by spec.chef; the Order controller
// (controller.go, in 100 lines) creates the Meals, owned by the Order,
// updates them when the Order changes, deletes the extra ones when sets
// goes down, and reports status.meals, status.processed and a Ready
// condition through the kit's StatusPatcher. Deleting an Order leaves its
// Meals to the garbage collector: the controller keeps no state outside the
// object graph, so it needs no finalizer.
//
// cmd/kitchen runs it against a cluster; README.md says how.
package kitchen
