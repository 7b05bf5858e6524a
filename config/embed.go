// Package config embeds the generated manifests (CRDs and webhook
// configurations) that local mode and the test harness install. The files are
// written by `make generate` (controller-gen); kustomize bases beside them
// package the same files for clusters.
package config

import "embed"

// Manifests holds crd/bases/*.yaml, webhook/manifests.yaml,
// rbac/tenant_roles.yaml (the ClusterRoles a tenant is bound to in its
// namespace) and rbac/dhcp-agent/role.yaml (the DHCP agent's ClusterRole).
//
//go:embed crd/bases/*.yaml webhook/manifests.yaml rbac/tenant_roles.yaml rbac/dhcp-agent/role.yaml
var Manifests embed.FS
