package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StepName names a step of an upgrade.
// +kubebuilder:validation:Enum=PreChecks;Machines;PostChecks;Cordon;Drain;SetImage;PowerCycle;WaitForBoot;Uncordon;PostCheck
type StepName string

// The upgrade's own steps, in order.
const (
	// StepPreChecks evaluates spec.preChecks against every Machine.
	StepPreChecks StepName = "PreChecks"
	// StepMachines upgrades the Machines, at most maxUnavailable at a time.
	StepMachines StepName = "Machines"
	// StepPostChecks evaluates spec.postChecks against every Machine.
	StepPostChecks StepName = "PostChecks"
)

// The steps of one Machine, in order.
const (
	// StepCordon marks the Machine's Node unschedulable.
	StepCordon StepName = "Cordon"
	// StepDrain evicts the Node's Pods through the Eviction API.
	StepDrain StepName = "Drain"
	// StepSetImage writes the Machine's image, version, bootDevice Network
	// and bootOnce.
	StepSetImage StepName = "SetImage"
	// StepPowerCycle resets the machine through its MachineBMC's Redfish
	// endpoint.
	StepPowerCycle StepName = "PowerCycle"
	// StepWaitForBoot waits until the Machine runs the new image.
	StepWaitForBoot StepName = "WaitForBoot"
	// StepUncordon marks the Node schedulable again.
	StepUncordon StepName = "Uncordon"
	// StepPostCheck evaluates spec.postChecks against this Machine.
	StepPostCheck StepName = "PostCheck"
)

// MachineSteps are the steps of one Machine, in order.
var MachineSteps = []StepName{StepCordon, StepDrain, StepSetImage, StepPowerCycle, StepWaitForBoot, StepUncordon, StepPostCheck}

// StepState is the state of a step.
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed;Skipped
type StepState string

// Step states.
const (
	// StepStatePending: not started.
	StepStatePending StepState = "Pending"
	// StepStateRunning: started (checkpointed) and not finished.
	StepStateRunning StepState = "Running"
	// StepStateSucceeded: finished.
	StepStateSucceeded StepState = "Succeeded"
	// StepStateFailed: the last attempt failed.
	StepStateFailed StepState = "Failed"
	// StepStateSkipped: not run (a skipped Machine, an abort).
	StepStateSkipped StepState = "Skipped"
)

// MachineState is the state of one Machine in an upgrade.
// +kubebuilder:validation:Enum=Pending;Upgrading;Upgraded;Failed;Skipped;Aborted
type MachineState string

// Machine states.
const (
	// MachinePending: not started.
	MachinePending MachineState = "Pending"
	// MachineUpgrading: a step of this Machine runs or waits.
	MachineUpgrading MachineState = "Upgrading"
	// MachineUpgraded: every step succeeded.
	MachineUpgraded MachineState = "Upgraded"
	// MachineFailed: a step used up its attempts (the upgrade is Stalled).
	MachineFailed MachineState = "Failed"
	// MachineSkipped: a person skipped it (the reason is in message).
	MachineSkipped MachineState = "Skipped"
	// MachineAborted: the upgrade was aborted before this Machine was
	// upgraded; message says what was left.
	MachineAborted MachineState = "Aborted"
)

// CordonedBy says who cordoned a Machine's Node, as seen when the Cordon
// step started.
// +kubebuilder:validation:Enum=Upgrade;Other
type CordonedBy string

// Who cordoned a Node.
const (
	// CordonedByUpgrade: the Node was schedulable when the Cordon step
	// started; the cordon is the upgrade's, and an abort, a skip or the
	// deletion of the upgrade takes it back (while the machine runs).
	CordonedByUpgrade CordonedBy = "Upgrade"
	// CordonedByOther: the Node was already unschedulable when the Cordon
	// step started; an abort, a skip or the deletion leaves it cordoned.
	CordonedByOther CordonedBy = "Other"
)

// UpgradePhase is a one-word summary for people; automation reads the
// conditions.
// +kubebuilder:validation:Enum=Pending;PreChecks;Upgrading;PostChecks;Succeeded;Failed;Aborted;Paused
type UpgradePhase string

// Phases.
const (
	PhasePending    UpgradePhase = "Pending"
	PhasePreChecks  UpgradePhase = "PreChecks"
	PhaseUpgrading  UpgradePhase = "Upgrading"
	PhasePostChecks UpgradePhase = "PostChecks"
	PhaseSucceeded  UpgradePhase = "Succeeded"
	PhaseFailed     UpgradePhase = "Failed"
	PhaseAborted    UpgradePhase = "Aborted"
	PhasePaused     UpgradePhase = "Paused"
)

// Check is a condition that must hold for every selected Machine: either a
// CEL expression over the Machine and its Node, or (post-checks only) a
// line the Machine must have printed on its serial console since its power
// cycle. Exactly one of expression and console is set.
// +kubebuilder:validation:XValidation:rule="has(self.expression) != has(self.console)",message="exactly one of expression and console must be set"
type Check struct {
	// name names the check in the status and Events.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	// expression is a CEL expression that must be true. It sees `machine`
	// (the Machine) and `node` (its Node, or an empty map), as maps, and
	// returns a bool, for example `machine.status.phase == "Running"`.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Expression string `json:"expression,omitempty"`

	// console is a regular expression (RE2 syntax, as Go's regexp) that a
	// line of the Machine's serial console (its status.consoleLog) must
	// match, among the lines printed since the upgrade power cycled it. It
	// is read on the manager's host: a Machine whose provider keeps no
	// console (KwokMachine), or whose console is on another host (a
	// QemuMachine under a per-node agent), fails the check, saying so.
	// Post-checks only.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Console string `json:"console,omitempty"`
}

// UpgradeStrategy says how many Machines are upgraded at once and in which
// order.
type UpgradeStrategy struct {
	// maxUnavailable is how many Machines may be in flight at once.
	// Default 1.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxUnavailable int32 `json:"maxUnavailable,omitempty"`

	// orderByLabel orders the Machines by the value of this label, then by
	// name; when empty, by name.
	// +optional
	// +kubebuilder:validation:MaxLength=317
	OrderByLabel string `json:"orderByLabel,omitempty"`

	// pauseBetweenMachines is waited after a Machine is upgraded before the
	// next one starts.
	// +optional
	PauseBetweenMachines *metav1.Duration `json:"pauseBetweenMachines,omitempty"`

	// maxAttempts bounds the attempts of one step (with a doubling backoff
	// from 1 s between them) before the upgrade is Stalled. Default 3.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=20
	MaxAttempts int32 `json:"maxAttempts,omitempty"`
}

// StepTimeouts bound the steps that wait. Steps that are one write (cordon,
// set image, uncordon) have no timeout of their own: they fail on the
// write's error.
type StepTimeouts struct {
	// drain bounds the eviction of a Node's Pods. Default 10m.
	// +optional
	Drain *metav1.Duration `json:"drain,omitempty"`
	// powerCycle bounds the Redfish reset request. Default 30s.
	// +optional
	PowerCycle *metav1.Duration `json:"powerCycle,omitempty"`
	// waitForBoot bounds the wait for a power-cycled Machine to come back
	// with the new image. Default 10m.
	// +optional
	WaitForBoot *metav1.Duration `json:"waitForBoot,omitempty"`
	// checks bounds how long pre- and post-checks may stay false. Default
	// 5m.
	// +optional
	Checks *metav1.Duration `json:"checks,omitempty"`
}

// MachineUpgradeSpec is the desired state of a MachineUpgrade.
type MachineUpgradeSpec struct {
	// selector selects the Machines to upgrade, in the MachineUpgrade's
	// namespace. The set is fixed when the upgrade starts.
	// +required
	Selector metav1.LabelSelector `json:"selector"`

	// image is the image every Machine is upgraded to.
	// +required
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9._-]*$`
	Image string `json:"image"`

	// version is the version every Machine is upgraded to (free text, as
	// the Machine's spec.version).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	Version string `json:"version"`

	// strategy says how many Machines at once and in which order.
	// +optional
	Strategy UpgradeStrategy `json:"strategy,omitempty"`

	// preChecks must all be true for every selected Machine before the
	// first one is touched. They are CEL expressions only (a console check
	// is about the boot of the new image).
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.all(c, !has(c.console))",message="preChecks cannot be console checks: a console check looks at the boot of the new image (use it in postChecks)"
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	PreChecks []Check `json:"preChecks,omitempty"`

	// postChecks must be true for each Machine after it is upgraded (its
	// PostCheck step, which waits for them up to timeouts.checks), and for
	// every Machine upgraded at the end. A console check is true once a line
	// matching it was printed since the Machine's power cycle.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	PostChecks []Check `json:"postChecks,omitempty"`

	// timeouts bound the steps that wait.
	// +optional
	Timeouts StepTimeouts `json:"timeouts,omitempty"`

	// paused stops new steps from starting; a step in flight finishes.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// abort stops the upgrade after the steps in flight and leaves every
	// Machine in a defined state (see docs/upgrades.md). It cannot be
	// undone.
	// +optional
	Abort bool `json:"abort,omitempty"`
}

// StepStatus is the checkpoint of one of the upgrade's own steps.
type StepStatus struct {
	// name is the step.
	// +required
	Name StepName `json:"name"`
	// state is the step's state.
	// +required
	State StepState `json:"state"`
	// started is when the last attempt started.
	// +optional
	Started *metav1.Time `json:"started,omitempty"`
	// finished is when the step finished.
	// +optional
	Finished *metav1.Time `json:"finished,omitempty"`
	// attempts counts the attempts.
	// +optional
	Attempts int32 `json:"attempts,omitempty"`
	// nextAttempt is when a failed step may be attempted again (backoff).
	// +optional
	NextAttempt *metav1.Time `json:"nextAttempt,omitempty"`
	// message says what the step does or why it failed.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// MachineProgress is the checkpoint of one Machine. The steps before step
// are done; step itself is in stepState.
type MachineProgress struct {
	// name is the Machine's name.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// state is where the Machine is in the upgrade.
	// +required
	State MachineState `json:"state"`
	// step is the Machine's current (or last) step.
	// +optional
	Step StepName `json:"step,omitempty"`
	// stepState is the state of step.
	// +optional
	StepState StepState `json:"stepState,omitempty"`
	// stepStarted is when the current attempt of step started; its
	// timeout counts from it.
	// +optional
	StepStarted *metav1.Time `json:"stepStarted,omitempty"`
	// attempts counts the attempts of step.
	// +optional
	Attempts int32 `json:"attempts,omitempty"`
	// nextAttempt is when a failed step may be attempted again (backoff).
	// +optional
	NextAttempt *metav1.Time `json:"nextAttempt,omitempty"`
	// previousImage is the Machine's image before the upgrade.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	PreviousImage string `json:"previousImage,omitempty"`
	// previousVersion is the Machine's version before the upgrade.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	PreviousVersion string `json:"previousVersion,omitempty"`
	// cordonedBy records, before the Cordon step writes, whether the
	// Machine's Node was schedulable then (Upgrade: the cordon is the
	// upgrade's own) or already cordoned by someone else (Other). Unset
	// before the Cordon step, when the Machine has no Node, and in progress
	// recorded before this field existed (then a Cordon step that
	// succeeded counts as Upgrade).
	// +optional
	CordonedBy CordonedBy `json:"cordonedBy,omitempty"`
	// consoleOffset is the size of the Machine's serial console file just
	// before the power cycle was sent (recorded when a console post-check
	// is set and the console is readable): a console check reads what was
	// printed after it, so an earlier boot's output cannot satisfy it.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ConsoleOffset *int64 `json:"consoleOffset,omitempty"`
	// consoleDigest is the hex SHA-256 of the console's first consoleOffset
	// bytes: a console rewritten from its start since (QEMU truncates its
	// console file at each start) no longer matches it and is read whole.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ConsoleDigest string `json:"consoleDigest,omitempty"`
	// started is when the Machine's first step started.
	// +optional
	Started *metav1.Time `json:"started,omitempty"`
	// finished is when the Machine was upgraded, skipped or aborted.
	// +optional
	Finished *metav1.Time `json:"finished,omitempty"`
	// lastError is the error of the last failed attempt.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	LastError string `json:"lastError,omitempty"`
	// message says what the Machine waits for, or why it was skipped or
	// left.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// MachineUpgradeStatus is the observed state of a MachineUpgrade.
type MachineUpgradeStatus struct {
	// phase is a one-word summary for people.
	// +optional
	Phase UpgradePhase `json:"phase,omitempty"`

	// steps are the upgrade's own steps: PreChecks, Machines, PostChecks.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=3
	Steps []StepStatus `json:"steps,omitempty"`

	// machines is the progress of each selected Machine, in upgrade order.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=5000
	Machines []MachineProgress `json:"machines,omitempty"`

	// currentStep names the step in flight: "PreChecks", "PostChecks", or
	// "<machine>/<step>" for each Machine in flight, comma-separated.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	CurrentStep string `json:"currentStep,omitempty"`

	// done is "n/m": Machines upgraded or skipped of those selected.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Done string `json:"done,omitempty"`

	// lastHandledRetry is the value of the retry annotation last acted on.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	LastHandledRetry string `json:"lastHandledRetry,omitempty"`

	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready, Progressing (while a step runs), Stalled (while a
	// step is out of attempts).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mup,categories=converge;machines
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Done",type=string,JSONPath=`.status.done`
// +kubebuilder:printcolumn:name="Current",type=string,JSONPath=`.status.currentStep`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.image`,priority=1
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.version`,priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1

// MachineUpgrade rolls the Machines its selector picks to a new image and
// version through their BMCs, one checkpointed step at a time.
type MachineUpgrade struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state.
	// +required
	Spec MachineUpgradeSpec `json:"spec"`

	// status is the observed state.
	// +optional
	// +kubebuilder:default:={"observedGeneration":-1}
	Status MachineUpgradeStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// MachineUpgradeList is a list of MachineUpgrades.
type MachineUpgradeList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the list's metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the MachineUpgrades.
	Items []MachineUpgrade `json:"items"`
}

// Finished reports whether the upgrade reached an end (Succeeded or
// Aborted); a Failed upgrade can still be retried.
func (u *MachineUpgrade) Finished() bool {
	return u.Status.Phase == PhaseSucceeded || u.Status.Phase == PhaseAborted
}

// Machine returns the progress of the Machine name, or nil.
func (s *MachineUpgradeStatus) Machine(name string) *MachineProgress {
	for i := range s.Machines {
		if s.Machines[i].Name == name {
			return &s.Machines[i]
		}
	}
	return nil
}

// Step returns the upgrade's own step name, or nil.
func (s *MachineUpgradeStatus) Step(name StepName) *StepStatus {
	for i := range s.Steps {
		if s.Steps[i].Name == name {
			return &s.Steps[i]
		}
	}
	return nil
}
