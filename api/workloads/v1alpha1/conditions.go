package v1alpha1

// Condition types of the workloads API.
const (
	// ReadyCondition summarises the object: True when every wanted replica is
	// available.
	ReadyCondition = "Ready"
	// ReplicaFailureCondition is True when a Pod could not be created or
	// deleted; its message carries the API error.
	ReplicaFailureCondition = "ReplicaFailure"
)

// Condition reasons of the workloads API.
const (
	// AvailableReason: every wanted replica is available.
	AvailableReason = "Available"
	// ScalingUpReason: fewer Pods exist than wanted.
	ScalingUpReason = "ScalingUp"
	// ScalingDownReason: more Pods exist than wanted.
	ScalingDownReason = "ScalingDown"
	// WaitingForAvailableReason: the Pods exist but not all are available yet.
	WaitingForAvailableReason = "WaitingForAvailable"
	// FailedCreateReason: the API server refused to create a Pod.
	FailedCreateReason = "FailedCreate"
	// FailedDeleteReason: the API server refused to delete a Pod.
	FailedDeleteReason = "FailedDelete"
)

// Condition types of BasicDeployments, as apps/v1 Deployments have them.
const (
	// AvailableCondition is True when at least replicas - maxUnavailable
	// Pods are available.
	AvailableCondition = "Available"
	// ProgressingCondition is True while a rollout makes progress or is
	// complete, False with ProgressDeadlineExceeded when it is stuck, and
	// Unknown while paused.
	ProgressingCondition = "Progressing"
)

// Condition reasons of BasicDeployments. The Progressing reasons are the ones
// kube-controller-manager uses, so tools that read Deployments read these.
const (
	// MinimumReplicasAvailableReason: Available is True.
	MinimumReplicasAvailableReason = "MinimumReplicasAvailable"
	// MinimumReplicasUnavailableReason: Available is False.
	MinimumReplicasUnavailableReason = "MinimumReplicasUnavailable"
	// NewReplicaSetCreatedReason: the rollout created a BasicReplicaSet.
	NewReplicaSetCreatedReason = "NewReplicaSetCreated"
	// FoundNewReplicaSetReason: the BasicReplicaSet of the template exists.
	FoundNewReplicaSetReason = "FoundNewReplicaSet"
	// ReplicaSetUpdatedReason: the rollout made progress.
	ReplicaSetUpdatedReason = "ReplicaSetUpdated"
	// NewReplicaSetAvailableReason: the rollout is complete.
	NewReplicaSetAvailableReason = "NewReplicaSetAvailable"
	// ProgressDeadlineExceededReason: no progress for
	// progressDeadlineSeconds.
	ProgressDeadlineExceededReason = "ProgressDeadlineExceeded"
	// PausedReason: spec.paused is true.
	PausedReason = "DeploymentPaused"
	// ResumedReason: spec.paused turned false.
	ResumedReason = "DeploymentResumed"
	// FailedCreateReplicaSetReason: the API refused the new BasicReplicaSet.
	FailedCreateReplicaSetReason = "ReplicaSetCreateError"
	// RollingOutReason: Ready is False while a rollout is under way.
	RollingOutReason = "RollingOut"
)
