package v1alpha1

// MachineFinalizer is held by the Machine controller until the hooks, the
// drain and the provider object's deletion are done.
const MachineFinalizer = "machine.converge.dev/machine"

// Hook annotations (as Cluster API's): any controller may put an annotation
// with this prefix on a Machine to hold its deletion before the drain
// (pre-drain) or before the provider object is deleted (pre-terminate). The
// value says who holds it and why; removing the annotation releases it.
const (
	PreDrainHookPrefix     = "pre-drain.delete.hook.machine.converge.dev/"
	PreTerminateHookPrefix = "pre-terminate.delete.hook.machine.converge.dev/"
	// ExcludeDrainAnnotation skips the drain when present.
	ExcludeDrainAnnotation = "machine.converge.dev/exclude-node-draining"
)

// Condition types of a Machine.
const (
	// ReadyCondition summarises the Machine: the provider is provisioned and
	// in the wanted power state, and nothing blocks it.
	ReadyCondition = "Ready"
	// InfrastructureReadyCondition mirrors the provider object: True once it
	// reports status.provisioned.
	InfrastructureReadyCondition = "InfrastructureReady"
	// NodeHealthyCondition is True when the Node matching providerID is
	// Ready.
	NodeHealthyCondition = "NodeHealthy"
	// StalledCondition is True while the Machine cannot progress until a
	// person changes something; its reason and message say what.
	StalledCondition = "Stalled"
	// DeletingCondition is present while the Machine is deleted; its reason
	// names the step and its message what holds it.
	DeletingCondition = "Deleting"
)

// Condition reasons of a Machine.
const (
	// RunningReason: provisioned and powered on.
	RunningReason = "Running"
	// PoweredOffReason: provisioned and powered off as asked.
	PoweredOffReason = "PoweredOff"
	// InfrastructureNotFoundReason: the provider object does not exist.
	InfrastructureNotFoundReason = "InfrastructureNotFound"
	// InfrastructureOwnedByOtherReason: the provider object is controlled by
	// another object; it is never taken over.
	InfrastructureOwnedByOtherReason = "InfrastructureOwnedByOther"
	// InfrastructureContractNotDeclaredReason: spec.infrastructureRef names
	// a kind that is not a namespaced kind whose CustomResourceDefinition
	// carries the label contract.converge.dev/infrastructure-machine=v1alpha1
	// (a core kind such as Node or Secret, a cluster-scoped kind, an
	// unlabelled or unserved one). Nothing of that kind is read, watched,
	// patched or deleted.
	InfrastructureContractNotDeclaredReason = "InfrastructureContractNotDeclared"
	// ProvisioningReason: the provider has not reported
	// status.provisioned yet.
	ProvisioningReason = "Provisioning"
	// ProvisionedReason: the provider reports status.provisioned.
	ProvisionedReason = "Provisioned"
	// PowerTransitionReason: the observed power state is not yet the wanted
	// one.
	PowerTransitionReason = "PowerTransition"
	// ContractViolationReason: the provider object's fields do not honour
	// the infrastructure-machine contract; the message lists them.
	ContractViolationReason = "ContractViolation"
	// DuplicateMACAddressReason: a NIC's MAC is used by another Machine; the
	// provider is not given this Machine's NICs until that is fixed.
	DuplicateMACAddressReason = "DuplicateMACAddress"
	// PausedReason: spec.paused is set.
	PausedReason = "Paused"
	// NodeReadyReason: the Node is Ready.
	NodeReadyReason = "NodeReady"
	// NodeNotReadyReason: the Node exists and is not Ready.
	NodeNotReadyReason = "NodeNotReady"
	// NodeNotFoundReason: no Node has this Machine's providerID.
	NodeNotFoundReason = "NodeNotFound"

	// WaitingForPreDrainHookReason: a pre-drain hook annotation holds the
	// deletion; the message names it.
	WaitingForPreDrainHookReason = "WaitingForPreDrainHook"
	// DrainingReason: the Node is cordoned and Pods are being evicted; the
	// message names Pods whose eviction a PodDisruptionBudget refuses.
	DrainingReason = "Draining"
	// WaitingForPreTerminateHookReason: a pre-terminate hook annotation
	// holds the deletion; the message names it.
	WaitingForPreTerminateHookReason = "WaitingForPreTerminateHook"
	// WaitingForInfrastructureDeletionReason: the provider object is being
	// deleted.
	WaitingForInfrastructureDeletionReason = "WaitingForInfrastructureDeletion"
)
