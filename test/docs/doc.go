// Package docs holds the test that keeps docs/architecture.md in step with
// the code: every controller wired in internal/setup, every verb of the
// converge binary and every API group under api/ (with its kinds) must be
// listed on the page. The lists are read from the source with go/parser, so
// the test imports nothing of the module and starts no control plane.
package docs
