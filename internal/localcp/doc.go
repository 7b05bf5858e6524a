// Package localcp runs a real, local Kubernetes control plane from the
// official binaries that `make tools` builds into bin/: etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler and kwok (which fakes one Ready node
// and the lifecycle of its Pods).
//
// It is what `converge up` runs and what internal/testenv starts for every
// test package, so the tests exercise the same control plane users get.
//
// Unlike controller-runtime's envtest, which mints a new CA and new client
// certificates on every start, localcp keeps its PKI and the service-account
// signing key in the data directory, so a restart keeps every object and the
// written kubeconfig keeps working. Every component is a supervised child
// process: stopped in reverse order with SIGTERM (then SIGKILL), and on Linux
// bound to the parent with PR_SET_PDEATHSIG so that no child outlives it, even
// when the parent is killed with SIGKILL.
package localcp
