// Package config embeds the generated manifests (CRDs and webhook
// configurations) that local mode and the test harness install. The files are
// written by `make generate` (controller-gen); kustomize bases beside them
// package the same files for clusters.
package config

import "embed"

// Manifests holds crd/bases/*.yaml and webhook/manifests.yaml.
//
//go:embed crd/bases/*.yaml webhook/manifests.yaml
var Manifests embed.FS
