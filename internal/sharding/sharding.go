// Package sharding holds the label that assigns Converge objects to a
// manager shard. It is its own package so that controllers can copy the
// label to the Converge objects they create without importing setup.
package sharding

// Label assigns an object to a shard (as Flux's sharding.fluxcd.io/key). A
// manager started with --shard-key=K reconciles only Converge objects
// labelled Label=K; a manager without a shard key reconciles only those
// without the label. Parents copy it to the Converge children they create.
const Label = "sharding.converge.dev/key"
