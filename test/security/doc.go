// Package security is the attack suite: every way a tenant (a ServiceAccount
// with only namespace-scoped rights, bound to the documented converge-edit
// ClusterRole in its own namespace), a network peer or a local user could
// reach past what the cluster admin granted, driven for real against the
// local control plane, real git servers and real PostgreSQL and MariaDB.
// Each test asserts that the attack failed, that the status names the
// reason, and that nothing outside the tenant changed. docs/security.md
// gives the threat model and the defence each test proves.
package security
