#!/usr/bin/env bash
# sync-chart.sh copies the generated CRDs and RBAC rules into the Helm chart,
# which cannot reference files outside its directory. `make verify` fails
# when the copies are stale.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
chart="$root/charts/converge"
mkdir -p "$chart/crds" "$chart/files"
rm -f "$chart"/crds/*.yaml
cp "$root"/config/crd/bases/*.yaml "$chart/crds/"
cp "$root/config/rbac/role.yaml" "$chart/files/role.yaml"
cp "$root/config/rbac/dhcp-agent/role.yaml" "$chart/files/dhcp-agent-role.yaml"
cp "$root/config/rbac/machineagent/role.yaml" "$chart/files/machine-agent-role.yaml"
cp "$root/config/webhook/manifests.yaml" "$chart/files/webhook-manifests.yaml"
cp "$root/config/rbac/tenant_roles.yaml" "$chart/files/tenant_roles.yaml"
