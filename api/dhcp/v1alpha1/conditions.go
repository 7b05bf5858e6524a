package v1alpha1

// Condition types.
const (
	// ReadyCondition summarises an IPPool (its spec is usable and the
	// allocations are counted) or a MachineNetworkConfig (every NIC has an
	// address).
	ReadyCondition = "Ready"
	// AgentReadyCondition is set on an IPPool by the DHCP agent serving its
	// network.
	AgentReadyCondition = "AgentReady"
	// ExhaustedCondition is True on an IPPool with no free address left.
	ExhaustedCondition = "Exhausted"
)

// Condition reasons.
const (
	// AddressesAvailableReason: the pool has free addresses (Ready True,
	// Exhausted False).
	AddressesAvailableReason = "AddressesAvailable"
	// PoolExhaustedReason: every address of the pool is allocated (pool
	// Exhausted True; a MachineNetworkConfig waiting for an address from it
	// is Ready False with this reason and the pool's name).
	PoolExhaustedReason = "PoolExhausted"
	// PausedReason: spec.paused is set; nothing is allocated from the pool.
	PausedReason = "Paused"
	// ServingReason: the DHCP agent answers on the network's bridge.
	ServingReason = "Serving"
	// AgentUnavailableReason: no DHCP agent serves the network (the manager
	// runs without a machine network namespace, or the agent failed to bind;
	// the message says which).
	AgentUnavailableReason = "AgentUnavailable"
	// AllocatedReason: every NIC of a MachineNetworkConfig has an address.
	AllocatedReason = "Allocated"
	// PoolNotFoundReason: no IPPool in the MachineNetworkConfig's namespace
	// serves a NIC's network.
	PoolNotFoundReason = "PoolNotFound"
	// AddressUnavailableReason: a static ipAddress is outside the pool's
	// CIDR, is its server or router address, is excluded
	// (pool.exclude), or is allocated to another MAC address.
	AddressUnavailableReason = "AddressUnavailable"
	// MACAddressClaimedReason: a NIC's MAC address already holds an
	// address on the same network in another namespace, which claimed it
	// first; a MAC address is served to one namespace per network only.
	MACAddressClaimedReason = "MACAddressClaimed"
)

// MachineNetworkConfigFinalizer releases a MachineNetworkConfig's addresses
// from their pools before it goes.
const MachineNetworkConfigFinalizer = "dhcp.converge.dev/release"
