// Package packaging tests what ships to clusters: the Helm chart
// (charts/converge) and the kustomize bases (config/default). It renders both
// with the pinned helm and kubectl from bin/, applies the renderings to a real
// API server (server-side dry run, after installing the CRDs for real), and
// checks the safety properties every rendering must keep: fixed webhook
// configuration names, webhooks that only ever intercept Converge's own API
// groups, least-privilege RBAC, and a hardened manager Deployment.
//
// Without bin/helm, bin/kubectl or the control-plane binaries the tests are
// skipped with a loud message (run `make tools`); with CI set they fail.
package packaging
