package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Labels and annotations the BasicDeployment controller writes on its
// BasicReplicaSets.
const (
	// PodTemplateHashLabel is added to a child's selector, template and
	// labels, so that the children of one BasicDeployment never select each
	// other's Pods. Its value is the hash in the child's name. The key is the
	// one apps/v1 Deployments use, so `kubectl get pods -L pod-template-hash`
	// works the same.
	PodTemplateHashLabel = "pod-template-hash"
	// RevisionAnnotation holds a child's revision number (as
	// deployment.kubernetes.io/revision).
	RevisionAnnotation = "workloads.converge.dev/revision"
	// RevisionHistoryAnnotation lists the earlier revisions a child has had,
	// comma-separated, when a rollback brought its template back.
	RevisionHistoryAnnotation = "workloads.converge.dev/revision-history"
	// DesiredReplicasAnnotation is the parent's spec.replicas when the child
	// was last scaled; a difference marks a scaling event.
	DesiredReplicasAnnotation = "workloads.converge.dev/desired-replicas"
	// MaxReplicasAnnotation is the parent's replicas plus maxSurge when the
	// child was last scaled; proportional scaling uses it.
	MaxReplicasAnnotation = "workloads.converge.dev/max-replicas"
	// ChangeCauseAnnotation is copied from the parent to the child and shown
	// by `converge rollout history` (as kubernetes.io/change-cause).
	ChangeCauseAnnotation = "kubernetes.io/change-cause"
)

// BasicDeploymentStrategyType is how old Pods are replaced by new ones.
// +kubebuilder:validation:Enum=RollingUpdate;Recreate
type BasicDeploymentStrategyType string

const (
	// RollingUpdateStrategyType replaces Pods gradually within maxSurge and
	// maxUnavailable.
	RollingUpdateStrategyType BasicDeploymentStrategyType = "RollingUpdate"
	// RecreateStrategyType scales the old Pods to zero before creating new
	// ones.
	RecreateStrategyType BasicDeploymentStrategyType = "Recreate"
)

// BasicDeploymentStrategy has the shape of apps/v1 DeploymentStrategy.
// +kubebuilder:validation:XValidation:rule="!has(self.type) || self.type != 'Recreate' || !has(self.rollingUpdate)",message="rollingUpdate may only be set when type is RollingUpdate"
type BasicDeploymentStrategy struct {
	// type is RollingUpdate (the default) or Recreate.
	// +optional
	Type BasicDeploymentStrategyType `json:"type,omitempty"`

	// rollingUpdate tunes the RollingUpdate strategy.
	// +optional
	RollingUpdate *RollingUpdateBasicDeployment `json:"rollingUpdate,omitempty"`
}

// RollingUpdateBasicDeployment bounds a rolling update.
type RollingUpdateBasicDeployment struct {
	// maxUnavailable is how many Pods (a number, or a percentage of
	// replicas rounded down) may be unavailable during the update. Defaults
	// to 25%. It cannot be 0 when maxSurge is 0.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:Pattern=`^(100|[1-9]?[0-9])%$`
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`

	// maxSurge is how many Pods (a number, or a percentage of replicas
	// rounded up) may exist above replicas during the update. Defaults to
	// 25%.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:Pattern=`^[0-9]{1,4}%$`
	MaxSurge *intstr.IntOrString `json:"maxSurge,omitempty"`
}

// BasicDeploymentSpec is the desired state of a BasicDeployment. The fields
// mean what they mean on an apps/v1 Deployment.
type BasicDeploymentSpec struct {
	// replicas is the number of Pods wanted. Defaults to 1.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	Replicas *int32 `json:"replicas,omitempty"`

	// selector is a label query over the Pods of this BasicDeployment. It
	// must match the template's labels and cannot be changed.
	// +required
	Selector *metav1.LabelSelector `json:"selector"`

	// template describes the Pods. A change to it starts a rollout.
	// +required
	Template corev1.PodTemplateSpec `json:"template"`

	// strategy is how old Pods are replaced by new ones.
	// +optional
	Strategy BasicDeploymentStrategy `json:"strategy,omitempty"`

	// minReadySeconds is how long a new Pod must be Ready to count as
	// available. Defaults to 0.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	MinReadySeconds int32 `json:"minReadySeconds,omitempty"`

	// revisionHistoryLimit is how many old BasicReplicaSets (scaled to
	// zero) are kept for rollback. Defaults to 10.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	RevisionHistoryLimit *int32 `json:"revisionHistoryLimit,omitempty"`

	// progressDeadlineSeconds is how long a rollout may go without progress
	// before Progressing turns False with reason ProgressDeadlineExceeded.
	// The rollout itself goes on. Defaults to 600; must exceed
	// minReadySeconds.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	ProgressDeadlineSeconds *int32 `json:"progressDeadlineSeconds,omitempty"`

	// paused stops rollouts: template changes create no new
	// BasicReplicaSet until it is false again. Scaling still happens.
	// +optional
	Paused bool `json:"paused,omitempty"`
}

// BasicDeploymentStatus is the observed state of a BasicDeployment, summed
// from its BasicReplicaSets' status.
type BasicDeploymentStatus struct {
	// replicas is the number of Pods of every revision (not being deleted).
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// updatedReplicas is the number of Pods of the current template.
	// +optional
	UpdatedReplicas int32 `json:"updatedReplicas"`

	// readyReplicas is the number of Ready Pods.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`

	// availableReplicas is the number of Pods Ready for minReadySeconds.
	// +optional
	AvailableReplicas int32 `json:"availableReplicas"`

	// unavailableReplicas is the Pods wanted by every BasicReplicaSet
	// (the sum of their spec.replicas) minus availableReplicas, at least 0.
	// +optional
	UnavailableReplicas int32 `json:"unavailableReplicas,omitempty"`

	// currentRevision is the revision of the BasicReplicaSet with the
	// current template.
	// +optional
	CurrentRevision int64 `json:"currentRevision,omitempty"`

	// collisionCount is bumped when a child name computed from the template
	// hash is taken by an object with another template; it is part of the
	// hash, so the next name differs.
	// +optional
	CollisionCount *int32 `json:"collisionCount,omitempty"`

	// lastProgressTime is when the rollout last made progress; the progress
	// deadline counts from it.
	// +optional
	LastProgressTime *metav1.Time `json:"lastProgressTime,omitempty"`

	// selector is the serialized label selector, for the scale subresource.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Selector string `json:"selector,omitempty"`

	// observedGeneration is the generation last fully reconciled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Available (at least replicas - maxUnavailable Pods
	// available), Progressing (False with ProgressDeadlineExceeded when a
	// rollout is stuck) and Ready (the rollout is complete and every Pod
	// available).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:shortName=bdeploy;bd,categories={converge,workloads}
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.readyReplicas`,description="Ready Pods"
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Up-to-date",type=integer,JSONPath=`.status.updatedReplicas`
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=`.status.availableReplicas`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Revision",type=integer,JSONPath=`.status.currentRevision`,priority=1
// +kubebuilder:printcolumn:name="Progressing",type=string,JSONPath=`.status.conditions[?(@.type=="Progressing")].reason`,priority=1

// BasicDeployment rolls out a Pod template through BasicReplicaSets, one per
// template revision, like an apps/v1 Deployment. It is the parent half of the
// parent-child example: it reads and writes BasicReplicaSets' spec and reads
// their status, and never touches Pods.
type BasicDeployment struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state.
	// +required
	Spec BasicDeploymentSpec `json:"spec"`

	// status is the observed state.
	// +optional
	// +kubebuilder:default:={"observedGeneration":-1}
	Status BasicDeploymentStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// BasicDeploymentList is a list of BasicDeployments.
type BasicDeploymentList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the BasicDeployments.
	Items []BasicDeployment `json:"items"`
}

// GetConditions returns the conditions, for the conditions helpers.
func (d *BasicDeployment) GetConditions() []metav1.Condition { return d.Status.Conditions }

// SetConditions sets the conditions, for the conditions helpers.
func (d *BasicDeployment) SetConditions(c []metav1.Condition) { d.Status.Conditions = c }
