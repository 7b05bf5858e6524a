package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// DriftPolicy says what a Sync does when an applied object is changed out of
// band.
// +kubebuilder:validation:Enum=Correct;Report
type DriftPolicy string

const (
	// DriftPolicyCorrect re-applies the desired state at once.
	DriftPolicyCorrect DriftPolicy = "Correct"
	// DriftPolicyReport only records the drift in status, an Event and
	// metrics.
	DriftPolicyReport DriftPolicy = "Report"
)

// SyncSpec is the desired state of a Sync.
type SyncSpec struct {
	// sourceRef is the GitRepository whose artifact is applied.
	// +required
	SourceRef SourceReference `json:"sourceRef"`

	// path is the directory of the artifact to apply, relative to the
	// repository root. Defaults to the root. A directory with a
	// kustomization.yaml is built with kustomize; otherwise every .yaml,
	// .yml and .json file below it is applied.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Path string `json:"path,omitempty"`

	// interval is how often the desired state is re-applied even without a
	// new revision. Drift is corrected as it happens, not at this interval.
	// Defaults to 10m.
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`

	// retryInterval is how soon a failed reconciliation is retried.
	// Defaults to interval.
	// +optional
	RetryInterval *metav1.Duration `json:"retryInterval,omitempty"`

	// timeout bounds one apply, including waiting for health. Defaults to
	// 5m.
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// prune deletes the objects removed from git, and the whole inventory
	// when the Sync is deleted. With false they are left in place
	// (orphaned).
	// +required
	Prune *bool `json:"prune"`

	// pruneLimit is the largest part of the inventory one revision may
	// prune without approval, as a count or a percentage. Above it nothing
	// is pruned and status.pendingPrune lists what would be, until the
	// revision is approved with the converge.dev/approve-prune annotation.
	// Defaults to 50%.
	// +optional
	// +kubebuilder:validation:XIntOrString
	PruneLimit *intstr.IntOrString `json:"pruneLimit,omitempty"`

	// driftPolicy is Correct (default: re-apply at once) or Report (record
	// only).
	// +optional
	DriftPolicy DriftPolicy `json:"driftPolicy,omitempty"`

	// targetNamespace sets the namespace of every namespaced object that has
	// none.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	TargetNamespace string `json:"targetNamespace,omitempty"`

	// serviceAccountName is a ServiceAccount in the Sync's namespace that
	// every read and write on the Sync's behalf impersonates (applies,
	// dependsOn, health checks, drift and prune lookups). Empty uses the
	// manager's --gitops-default-service-account; without one, a manager in
	// lockdown (--gitops-lockdown, the chart's default) refuses the Sync,
	// and otherwise the manager's own identity is used.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// dependsOn lists objects that must be ready before this Sync applies.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	DependsOn []Dependency `json:"dependsOn,omitempty"`

	// wait waits, after applying, until every applied object is healthy
	// (kstatus rules, or healthChecks for custom kinds) before Ready.
	// +optional
	Wait bool `json:"wait,omitempty"`

	// healthChecks are CEL expressions deciding the health of kinds the
	// built-in rules do not know. They are evaluated with spec.wait.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	HealthChecks []HealthCheck `json:"healthChecks,omitempty"`

	// force deletes and recreates an object whose update is refused because
	// an immutable field changed.
	// +optional
	Force bool `json:"force,omitempty"`

	// suspend stops applying, pruning and correcting drift.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// SourceReference names a GitRepository.
type SourceReference struct {
	// kind of the source; only GitRepository.
	// +optional
	// +kubebuilder:validation:Enum=GitRepository
	Kind string `json:"kind,omitempty"`

	// name of the source.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// namespace of the source; defaults to the Sync's. A cross-namespace
	// reference is refused unless the manager allows it
	// (--gitops-allow-cross-namespace-refs).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`
}

// Dependency is an object that must be ready first.
type Dependency struct {
	// apiVersion of the object; defaults to gitops.converge.dev/v1alpha1.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	APIVersion string `json:"apiVersion,omitempty"`

	// kind of the object; defaults to Sync.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind,omitempty"`

	// name of the object.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// namespace of the object; defaults to the Sync's (ignored for
	// cluster-scoped kinds).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`

	// ready is a CEL expression over the object (as `self`) that is true
	// when it is ready, for example `self.status.phase == "Bound"`. Default:
	// its Ready condition is True (and, for a Sync, its observedGeneration is
	// current).
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Ready string `json:"ready,omitempty"`
}

// HealthCheck decides the health of one kind with CEL.
type HealthCheck struct {
	// apiVersion of the kind, for example example.com/v1.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	APIVersion string `json:"apiVersion"`

	// kind the check applies to.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind"`

	// current is a CEL expression over the object (as `self`), true when it
	// is healthy.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Current string `json:"current"`

	// failed is an optional CEL expression, true when the object has failed
	// for good (the Sync stops waiting and reports it).
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Failed string `json:"failed,omitempty"`
}

// ObjectRef identifies one applied object.
type ObjectRef struct {
	// group of the object; empty for the core group.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Group string `json:"group,omitempty"`
	// version the object was applied with.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Version string `json:"version"`
	// kind of the object.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind"`
	// namespace of the object; empty when cluster-scoped.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`
	// name of the object.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// DriftStatus records out-of-band changes to applied objects.
type DriftStatus struct {
	// count is the number of drifts detected since the Sync was created.
	// +optional
	Count int64 `json:"count,omitempty"`
	// lastDetected is when drift was last detected.
	// +optional
	LastDetected *metav1.Time `json:"lastDetected,omitempty"`
	// objects are the most recent drifts, newest first.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	Objects []DriftedObject `json:"objects,omitempty"`
}

// DriftedObject is one detected drift.
type DriftedObject struct {
	// object that drifted.
	// +required
	Object ObjectRef `json:"object"`
	// fieldManagers are the field managers that changed it (from
	// managedFields); "(deleted)" when it was deleted.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	FieldManagers []string `json:"fieldManagers,omitempty"`
	// fields are the changed field paths, at most 16.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Fields []string `json:"fields,omitempty"`
	// action is Corrected or Reported.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Action string `json:"action,omitempty"`
	// time the drift was detected.
	// +required
	Time metav1.Time `json:"time"`
}

// PendingPrune is a prune held by pruneLimit.
type PendingPrune struct {
	// revision whose prune is held; approve it with the
	// converge.dev/approve-prune annotation set to this value.
	// +required
	// +kubebuilder:validation:MaxLength=512
	Revision string `json:"revision"`
	// count is the number of objects the prune would delete.
	// +required
	Count int32 `json:"count"`
	// limit is the pruneLimit resolved against the inventory.
	// +required
	Limit int32 `json:"limit"`
	// objects are the objects it would delete (at most 100 listed).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	Objects []ObjectRef `json:"objects,omitempty"`
}

// SyncStatus is the observed state of a Sync.
type SyncStatus struct {
	// observedGeneration is the generation last fully reconciled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready, Healthy, PruneHeld, and Reconciling and Stalled
	// while True.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// lastAppliedRevision is the last revision applied successfully.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	LastAppliedRevision string `json:"lastAppliedRevision,omitempty"`

	// lastAttemptedRevision is the last revision an apply was attempted for.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	LastAttemptedRevision string `json:"lastAttemptedRevision,omitempty"`

	// inventory is every object this Sync applied and has not pruned. It is
	// the source of truth for pruning and drift watching, also across
	// manager restarts.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20000
	Inventory []ObjectRef `json:"inventory,omitempty"`

	// drift records out-of-band changes to applied objects.
	// +optional
	Drift *DriftStatus `json:"drift,omitempty"`

	// pendingPrune is a prune held by pruneLimit, waiting for approval.
	// +optional
	PendingPrune *PendingPrune `json:"pendingPrune,omitempty"`

	// lastApplySummary counts the objects of the last apply by result, for
	// example "3 created, 1 configured, 10 unchanged, 1 deleted".
	// +optional
	// +kubebuilder:validation:MaxLength=256
	LastApplySummary string `json:"lastApplySummary,omitempty"`

	// lastHandledReconcileAt is the last value of the
	// converge.dev/reconcile-requested-at annotation acted on.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	LastHandledReconcileAt string `json:"lastHandledReconcileAt,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sy,categories={converge,gitops}
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Revision",type=string,JSONPath=`.status.lastAppliedRevision`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Source",type=string,JSONPath=`.spec.sourceRef.name`,priority=1
// +kubebuilder:printcolumn:name="Path",type=string,JSONPath=`.spec.path`,priority=1

// Sync applies a path of a GitRepository's revision to the cluster with
// server-side apply, corrects drift as it happens and prunes objects removed
// from git, safely.
type Sync struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state.
	// +required
	Spec SyncSpec `json:"spec"`

	// status is the observed state.
	// +optional
	// +kubebuilder:default:={"observedGeneration":-1}
	Status SyncStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// SyncList is a list of Syncs.
type SyncList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the Syncs.
	Items []Sync `json:"items"`
}

// GetConditions returns the conditions, for the conditions helpers.
func (r *Sync) GetConditions() []metav1.Condition { return r.Status.Conditions }

// SetConditions sets the conditions, for the conditions helpers.
func (r *Sync) SetConditions(c []metav1.Condition) { r.Status.Conditions = c }
