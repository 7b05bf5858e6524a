package v1alpha1

// Condition types of a MachineBMC.
const (
	// ReadyCondition is True once the BMC answered, through its published
	// endpoints, an IPMI Get Device ID in an authenticated session and a
	// Redfish GET /redfish/v1 (for the protocols it serves).
	ReadyCondition = "Ready"
	// MachineAvailableCondition is True when spec.machineRef names a
	// Machine in the MachineBMC's namespace.
	MachineAvailableCondition = "MachineAvailable"
	// SecretAvailableCondition is True when spec.authSecretRef names a
	// Secret with non-empty username and password keys.
	SecretAvailableCondition = "SecretAvailable"
)

// Condition reasons of a MachineBMC.
const (
	// ServingReason: Ready; the endpoints answered the controller's probe.
	ServingReason = "Serving"
	// ProbeFailedReason: the endpoints are published but the probe through
	// them failed (the message says which protocol and why).
	ProbeFailedReason = "ProbeFailed"
	// MachineFoundReason: MachineAvailable; the Machine exists.
	MachineFoundReason = "MachineFound"
	// MachineNotFoundReason: no Machine of that name in the namespace (a
	// MachineBMC never reaches into another namespace).
	MachineNotFoundReason = "MachineNotFound"
	// SecretFoundReason: SecretAvailable; the credentials are usable.
	SecretFoundReason = "SecretFound"
	// SecretNotFoundReason: no Secret of that name in the namespace.
	SecretNotFoundReason = "SecretNotFound"
	// SecretInvalidReason: the Secret lacks username or password, or they
	// are too long for IPMI (16 and 20 bytes).
	SecretInvalidReason = "SecretInvalid"
	// ServicePendingReason: the manager publishes BMCs through Services
	// and this one has no address clients can use yet (no load-balancer
	// address assigned, no Node address for a NodePort).
	ServicePendingReason = "ServicePending"
	// ServiceConflictReason: a Service of the name the MachineBMC
	// publishes through exists and is not the MachineBMC's; it is neither
	// adopted nor changed.
	ServiceConflictReason = "ServiceConflict"
)

// MachineBMCLabel on a MachineBMC's Service and EndpointSlice names the
// MachineBMC.
const MachineBMCLabel = "bmc.converge.dev/machinebmc"

// Keys of the credentials Secret.
const (
	UsernameKey = "username"
	PasswordKey = "password"
)

// VirtualMediaAnnotation on a Machine holds the image (name or URL) a
// Redfish InsertMedia inserted; EjectMedia removes it. The Machine's
// spec.image is set from it at insertion.
const VirtualMediaAnnotation = "bmc.converge.dev/virtual-media"
