// Package machine is the generic Machine controller. It drives any provider
// kind that honours the infrastructure-machine contract
// (pkg/contract/infrastructuremachine) through contract fields only: it takes
// controller ownership of the provider object, copies the wanted power
// state, boot device, image and NICs (with stable generated MACs, refused
// when another Machine uses them) to it, bubbles the observed state up, and
// finds the Node whose providerID matches. Deletion follows Cluster API:
// pre-drain hooks, a drain that honours PodDisruptionBudgets, pre-terminate
// hooks, then the provider object's deletion, then the finalizer.
package machine
