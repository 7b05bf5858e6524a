package kitchen

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kitchenv1alpha1 "github.com/converge-dev/converge/examples/kitchen/api/v1alpha1"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

// +kubebuilder:rbac:groups=kitchen.example.converge.dev,resources=orders,verbs=get;list;watch
// +kubebuilder:rbac:groups=kitchen.example.converge.dev,resources=orders/status,verbs=get;patch
// +kubebuilder:rbac:groups=kitchen.example.converge.dev,resources=orders/finalizers,verbs=update
// +kubebuilder:rbac:groups=kitchen.example.converge.dev,resources=meals,verbs=get;list;watch;create;patch;delete

// Reconciler makes the Meals of Orders, and serves an Order once the Chef cooked them.
type Reconciler struct{ client.Client }

// SetupWithManager registers the controller: Orders, and the Meals they own.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("kitchen-order").
		For(&kitchenv1alpha1.Order{}).Owns(&kitchenv1alpha1.Meal{}).Complete(r)
}

// Reconcile makes an Order's Meals match its spec and reports how far that got.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	o := &kitchenv1alpha1.Order{}
	if err := r.Get(ctx, req.NamespacedName, o); err != nil || !o.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, client.IgnoreNotFound(err) // the garbage collector clears the table
	}
	defer creconcile.NewStatusPatcher(r.Client, o).PatchOnReturn(ctx, o, &retErr)
	served, err := r.cook(ctx, o)
	st := &o.Status
	st.Meals, st.Processed = served, err == nil && served == o.Spec.Sets
	switch {
	case err != nil:
		creconcile.MarkFalse(&st.Conditions, o.Generation, kitchenv1alpha1.ReadyCondition, kitchenv1alpha1.KitchenErrorReason, creconcile.Truncate(err.Error(), creconcile.MaxMessageBytes))
		return ctrl.Result{}, err // the queue retries; observedGeneration moves on success only
	case st.Processed:
		creconcile.MarkTrue(&st.Conditions, o.Generation, kitchenv1alpha1.ReadyCondition, kitchenv1alpha1.ServedReason, fmt.Sprintf("%d meals served", served))
	default:
		creconcile.MarkFalse(&st.Conditions, o.Generation, kitchenv1alpha1.ReadyCondition, kitchenv1alpha1.CookingReason, fmt.Sprintf("%d of %d meals served", served, o.Spec.Sets))
	}
	st.ObservedGeneration = o.Generation
	return ctrl.Result{}, nil
}

// cook creates missing Meals, updates outdated ones, deletes extra ones; it counts the cooked ones.
func (r *Reconciler) cook(ctx context.Context, o *kitchenv1alpha1.Order) (served int32, _ error) {
	var meals kitchenv1alpha1.MealList
	if err := r.List(ctx, &meals, client.InNamespace(o.Namespace), client.MatchingLabels{kitchenv1alpha1.OrderLabel: o.Name}); err != nil {
		return 0, err
	}
	have := map[int32]bool{}
	for i := range meals.Items {
		m := &meals.Items[i]
		switch want := meal(o, m.Spec.Set); {
		case !metav1.IsControlledBy(m, o) || !m.DeletionTimestamp.IsZero():
		case m.Spec.Set >= o.Spec.Sets:
			if err := r.Delete(ctx, m, client.Preconditions{UID: &m.UID}); client.IgnoreNotFound(err) != nil {
				return served, err
			}
		case !equality.Semantic.DeepEqual(m.Spec, want.Spec): // to be cooked again
			base := m.DeepCopy()
			m.Spec, have[m.Spec.Set] = want.Spec, true
			if err := r.Patch(ctx, m, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}), client.FieldOwner("kitchen-order")); err != nil {
				return served, err
			}
		case m.Status.ObservedGeneration == m.Generation && creconcile.IsTrue(m.Status.Conditions, kitchenv1alpha1.ReadyCondition):
			have[m.Spec.Set], served = true, served+1
		default:
			have[m.Spec.Set] = true
		}
	}
	for set := range o.Spec.Sets {
		if have[set] {
			continue
		}
		if err := r.Create(ctx, meal(o, set), client.FieldOwner("kitchen-order")); err != nil && !apierrors.IsAlreadyExists(err) {
			return served, err // AlreadyExists: the cache is behind
		}
	}
	return served, nil
}

// meal is the Meal of set that o asks for, controlled by o.
func meal(o *kitchenv1alpha1.Order, set int32) *kitchenv1alpha1.Meal {
	return &kitchenv1alpha1.Meal{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", o.Name, set), Namespace: o.Namespace, Labels: map[string]string{kitchenv1alpha1.OrderLabel: o.Name},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(o, kitchenv1alpha1.GroupVersion.WithKind("Order"))}},
		Spec: kitchenv1alpha1.MealSpec{Set: set, MealConfig: o.Spec.MealConfig, Chef: o.Spec.Chef},
	}
}
