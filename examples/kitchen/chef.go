package kitchen

import (
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kitchenv1alpha1 "github.com/converge-dev/converge/examples/kitchen/api/v1alpha1"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

// +kubebuilder:rbac:groups=kitchen.example.converge.dev,resources=meals/status,verbs=get;patch

// Chef cooks Meals: it stands for the worker outside the Order controller
// that does the work and reports it on the Meal, as a kubelet does for a
// Pod. The Order is Ready only once every Meal is.
type Chef struct{ client.Client }

// SetupWithManager registers the controller: Meals.
func (r *Chef) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("kitchen-chef").For(&kitchenv1alpha1.Meal{}).Complete(r)
}

// Reconcile cooks a Meal to its current spec.
func (r *Chef) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	m := &kitchenv1alpha1.Meal{}
	if err := r.Get(ctx, req.NamespacedName, m); err != nil || !m.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	defer creconcile.NewStatusPatcher(r.Client, m).PatchOnReturn(ctx, m, &retErr)
	creconcile.MarkTrue(&m.Status.Conditions, m.Generation, kitchenv1alpha1.ReadyCondition, kitchenv1alpha1.CookedReason,
		fmt.Sprintf("%s cooked %s by %s", m.Name, m.Spec.MealConfig.Main, m.Spec.Chef))
	m.Status.ObservedGeneration = m.Generation
	return ctrl.Result{}, nil
}
