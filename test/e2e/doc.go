// Package e2e drives the built converge binary and kubectl, as a user would,
// on the local control plane that `converge up` starts.
package e2e
