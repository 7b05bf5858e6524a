package v1alpha1

// Condition types of a MachineUpgrade.
const (
	// ReadyCondition is True once every Machine is upgraded (or skipped)
	// and the cluster post-checks passed.
	ReadyCondition = "Ready"
	// ProgressingCondition is True while a step runs or waits; absent
	// otherwise.
	ProgressingCondition = "Progressing"
	// StalledCondition is True when a step used up its attempts: the
	// message names the step, the Machine and the reason; only a person
	// (retry, skip, abort) moves it on.
	StalledCondition = "Stalled"
)

// Condition reasons of a MachineUpgrade.
const (
	// SucceededReason: Ready; every Machine is upgraded or skipped and the
	// post-checks passed.
	SucceededReason = "Succeeded"
	// PendingReason: nothing has started yet.
	PendingReason = "Pending"
	// RunningPreChecksReason: the pre-checks are being evaluated.
	RunningPreChecksReason = "RunningPreChecks"
	// UpgradingReason: Machines are being upgraded; the message names the
	// Machines in flight and their steps.
	UpgradingReason = "Upgrading"
	// DrainBlockedReason: a drain waits on an eviction that a
	// PodDisruptionBudget refuses; the message names the Pods.
	DrainBlockedReason = "DrainBlocked"
	// WaitingForMachineReason: a power-cycled Machine has not come back
	// with the new image yet.
	WaitingForMachineReason = "WaitingForMachine"
	// WaitingForUpgradeReason: another unfinished MachineUpgrade of the
	// namespace shares Machines with this one and goes first (admission
	// refuses such a pair; this covers two admitted at the same moment, or
	// one stored without the webhook); the message names it. Nothing of
	// this upgrade has touched a Machine; it starts when the other is done.
	WaitingForUpgradeReason = "WaitingForUpgrade"
	// RunningPostChecksReason: the cluster post-checks are being evaluated.
	RunningPostChecksReason = "RunningPostChecks"
	// PausedReason: spec.paused is set; no new step starts.
	PausedReason = "Paused"
	// AbortedReason: spec.abort was set; the upgrade stopped after the
	// steps in flight and left every Machine in the state the status says.
	AbortedReason = "Aborted"
	// StepFailedReason: Stalled; a step failed maxAttempts times.
	StepFailedReason = "StepFailed"
	// ChecksFailedReason: Stalled; the pre- or post-checks failed
	// maxAttempts times.
	ChecksFailedReason = "ChecksFailed"
	// InvalidSpecReason: a check does not compile or the selector is
	// invalid; fix the spec.
	InvalidSpecReason = "InvalidSpec"
)

// MachineUpgradeFinalizer is held by the MachineUpgrade controller while an
// upgrade is unfinished: its deletion first leaves every Machine in flight
// as an abort leaves it (a cordon of the upgrade's own taken back while the
// machine runs), then the finalizer is removed. See docs/upgrades.md.
const MachineUpgradeFinalizer = "upgrade.converge.dev/machineupgrade"

// Annotations are the verbs a person (or `converge upgrade`) writes on a
// MachineUpgrade.
const (
	// RetryAnnotation: a new value re-runs the failed step of the failed
	// Machine (or the failed checks) once more, with fresh attempts.
	RetryAnnotation = "upgrade.converge.dev/retry"
	// SkipAnnotationPrefix + a Machine's name, with a reason as value,
	// marks that Machine Skipped (unless it is already done): the upgrade
	// moves on without it.
	SkipAnnotationPrefix = "skip.upgrade.converge.dev/"
)

// Node annotations a Machine provider sets when the machine boots; the
// upgrade reads them to know what a Machine came back with.
const (
	// BootedImageAnnotation on a Node is the image its machine booted.
	BootedImageAnnotation = "infrastructure.converge.dev/booted-image"
	// BootedVersionAnnotation on a Node is the version (the Machine's
	// spec.version) its machine booted.
	BootedVersionAnnotation = "infrastructure.converge.dev/booted-version"
)
