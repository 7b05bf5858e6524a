package v1alpha1

// LoadBalancerClass is the spec.loadBalancerClass Converge serves. Services
// without a class are served too unless the manager runs with
// --lb-default-class=false.
const LoadBalancerClass = "converge.dev/lb"

// Service annotations (the Service API has no fields for these).
const (
	// AddressAnnotation requests a specific address from the pool.
	AddressAnnotation = "lb.converge.dev/address"
	// PoolAnnotation names the IPAddressPool to allocate from; without it
	// the auto-assign pools granted to the namespace are tried by priority.
	PoolAnnotation = "lb.converge.dev/pool"
	// AllowSharedIPAnnotation is a sharing key: Services of one namespace
	// with the same key and no colliding port share one address.
	AllowSharedIPAnnotation = "lb.converge.dev/allow-shared-ip"
	// AnnouncingNodeAnnotation is written by the agent that answers ARP for
	// the Service's address (also in the LoadBalancerReady message).
	AnnouncingNodeAnnotation = "lb.converge.dev/announcing-node"
)

// Condition types.
const (
	// LoadBalancerReadyCondition is set on the Service: True only after the
	// announcing agent opened a connection to VIP:port through the data
	// plane and reached an endpoint.
	LoadBalancerReadyCondition = "LoadBalancerReady"
	// ReadyCondition summarises an IPAddressPool.
	ReadyCondition = "Ready"
)

// Condition reasons.
const (
	// ReachableReason: a probe through VIP:port reached an endpoint.
	ReachableReason = "Reachable"
	// NoReadyEndpointsReason: the Service has no ready endpoint to send to.
	NoReadyEndpointsReason = "NoReadyEndpoints"
	// UnreachableReason: endpoints exist but the probe through the VIP
	// failed (refused, timed out); retried on a schedule.
	UnreachableReason = "Unreachable"
	// AwaitingAnnouncementReason: an address is assigned; no agent has
	// taken the address's Lease and probed it yet.
	AwaitingAnnouncementReason = "AwaitingAnnouncement"
	// PoolExhaustedReason: no address is left in the pools the Service may
	// use (also the pool's Ready reason when it is full).
	PoolExhaustedReason = "PoolExhausted"
	// AddressUnavailableReason: the requested address is outside every
	// usable pool or held by another Service that may not share it.
	AddressUnavailableReason = "AddressUnavailable"
	// PoolNotAllowedReason: the pool named by the annotation does not exist
	// or is not granted to the Service's namespace.
	PoolNotAllowedReason = "PoolNotAllowed"
	// ListenerLimitExceededReason: the Service's ports would take its
	// namespace past the listeners the cluster admin allows per namespace
	// (--lb-max-listeners-per-namespace); the message names the bound and
	// the namespace. It gets no address.
	ListenerLimitExceededReason = "ListenerLimitExceeded"
	// AssignmentLimitExceededReason: every pool the Service may use holds
	// the most assignments the cluster admin allows per pool
	// (--lb-max-assignments-per-pool); the message names the bound and the
	// pool. It gets no address, and the pool is left as it was.
	AssignmentLimitExceededReason = "AssignmentLimitExceeded"
	// TooManyPortsReason: the Service has more ports than a pool's status
	// can record for one Service (MaxAssignmentPorts); the message names
	// the bound. It gets no address.
	TooManyPortsReason = "TooManyPorts"
	// SharingKeyTooLongReason: the Service's lb.converge.dev/allow-shared-ip
	// annotation is longer than a pool's status can record
	// (MaxSharingKeyLength characters); the message names the annotation
	// and the bound. It gets no address.
	SharingKeyTooLongReason = "SharingKeyTooLong"
	// AddressesAvailableReason: the pool has free addresses.
	AddressesAvailableReason = "AddressesAvailable"
)
