package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// OrderLabel is set on every Meal to the name of the Order it was cooked
// for, so an Order's Meals are listed by label.
const OrderLabel = "kitchen.example.converge.dev/order"

// ReadyCondition is the condition both kinds report: on an Order, True when
// every set of the Order has its Meal, cooked to the Order's current spec;
// on a Meal, True when the chef cooked it to its current spec.
const ReadyCondition = "Ready"

// Reasons of the Ready condition.
const (
	// ServedReason: every set has its Meal, cooked.
	ServedReason = "Served"
	// CookingReason: Meals are being made, cooked or removed.
	CookingReason = "Cooking"
	// CookedReason, on a Meal: the chef cooked it.
	CookedReason = "Cooked"
	// KitchenErrorReason: a Meal could not be written; the message says why.
	KitchenErrorReason = "KitchenError"
)

// MealConfig describes the meal of one set.
type MealConfig struct {
	// Main is the main dish.
	// +kubebuilder:validation:MinLength=1
	Main string `json:"main"`
	// Sides are served with the main dish.
	// +optional
	Sides []string `json:"sides,omitempty"`
}

// OrderSpec is what the customer ordered.
type OrderSpec struct {
	// MealConfig is the meal every set gets.
	MealConfig MealConfig `json:"mealConfig"`
	// Sets is how many Meals to cook: at least 1 (the webhook refuses
	// fewer, naming the field).
	// +kubebuilder:validation:Maximum=100
	Sets int32 `json:"sets"`
	// Chef cooks the Meals.
	// +kubebuilder:validation:MinLength=1
	Chef string `json:"chef"`
}

// OrderStatus is what the kitchen has done with the Order.
type OrderStatus struct {
	// ObservedGeneration is the generation of the spec this status is for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Processed is true when every set has its Meal, cooked to the current
	// spec.
	// +optional
	Processed bool `json:"processed,omitempty"`
	// Meals is how many of the Order's Meals are cooked (Ready) to the
	// current spec.
	// +optional
	Meals int32 `json:"meals,omitempty"`
	// Conditions: Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Order asks the kitchen for spec.sets Meals of spec.mealConfig, cooked by
// spec.chef.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Chef",type=string,JSONPath=`.spec.chef`
// +kubebuilder:printcolumn:name="Sets",type=integer,JSONPath=`.spec.sets`
// +kubebuilder:printcolumn:name="Meals",type=integer,JSONPath=`.status.meals`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Order struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   OrderSpec   `json:"spec"`
	Status OrderStatus `json:"status,omitempty"`
}

// OrderList is a list of Orders.
//
// +kubebuilder:object:root=true
type OrderList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Order `json:"items"`
}

// MealSpec is one set of an Order.
type MealSpec struct {
	// Set is the number of the set, from 0 to the Order's sets - 1.
	// +kubebuilder:validation:Minimum=0
	Set int32 `json:"set"`
	// MealConfig is the meal, as the Order asks for it.
	MealConfig MealConfig `json:"mealConfig"`
	// Chef cooks it.
	Chef string `json:"chef"`
}

// MealStatus is what the chef reports about the Meal.
type MealStatus struct {
	// ObservedGeneration is the generation of the spec this status is for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready, True once the Meal is cooked to its spec.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Meal is one set of an Order, owned by the Order (a controller
// ownerReference): deleting the Order deletes its Meals. The chef cooks it
// and reports that in its Ready condition.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Set",type=integer,JSONPath=`.spec.set`
// +kubebuilder:printcolumn:name="Main",type=string,JSONPath=`.spec.mealConfig.main`
// +kubebuilder:printcolumn:name="Chef",type=string,JSONPath=`.spec.chef`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
type Meal struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   MealSpec   `json:"spec"`
	Status MealStatus `json:"status,omitempty"`
}

// MealList is a list of Meals.
//
// +kubebuilder:object:root=true
type MealList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Meal `json:"items"`
}
