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
