#!/usr/bin/env bash
# build-tools.sh builds the control-plane binaries (kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl, etcd, kwok) and the dev tools
# (controller-gen, golangci-lint, helm) from the modules pinned under hack/tools,
# into bin/.
#
# Built binaries are kept in a cache outside the clone
# (${CONVERGE_TOOLS_CACHE:-~/.cache/converge/tools}/<key>), keyed by a hash of the
# tools modules' go.mod/go.sum and of this script, so a fresh clone on a warm
# machine only copies them, and a changed pin rebuilds. Idempotent: a binary
# already in bin/ with the current key is skipped.
#
# Usage: hack/build-tools.sh [name ...]   (default: every tool)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/bin"
tools="$root/hack/tools"
k8s_version=v1.37.1

key=$(cat "$0" "$tools"/go.mod "$tools"/go.sum "$tools"/*/go.mod "$tools"/*/go.sum | sha256sum | cut -c1-16)
cache="${CONVERGE_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/converge/tools}/$key"
mkdir -p "$bin" "$cache"

k8s_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 -X k8s.io/component-base/version.gitTreeState=clean"

# name|module dir|package|ldflags
catalog=(
  "kube-apiserver|.|k8s.io/kubernetes/cmd/kube-apiserver|$k8s_ldflags"
  "kube-controller-manager|.|k8s.io/kubernetes/cmd/kube-controller-manager|$k8s_ldflags"
  "kube-scheduler|.|k8s.io/kubernetes/cmd/kube-scheduler|$k8s_ldflags"
  "kubectl|.|k8s.io/kubernetes/cmd/kubectl|$k8s_ldflags"
  "etcd|.|go.etcd.io/etcd/server/v3|-s -w"
  "kwok|.|sigs.k8s.io/kwok/cmd/kwok|-s -w"
  "controller-gen|.|sigs.k8s.io/controller-tools/cmd/controller-gen|-s -w"
  "golangci-lint|lint|github.com/golangci/golangci-lint/v2/cmd/golangci-lint|-s -w"
  "helm|helm|helm.sh/helm/v3/cmd/helm|-s -w"
)

want=("$@")
selected() {
  [ ${#want[@]} -eq 0 ] && return 0
  local w
  for w in "${want[@]}"; do [ "$w" = "$1" ] && return 0; done
  return 1
}

start_all=$SECONDS
for entry in "${catalog[@]}"; do
  IFS='|' read -r name dir pkg ldflags <<<"$entry"
  selected "$name" || continue
  if [ -x "$bin/$name" ] && [ "$(cat "$bin/.$name.key" 2>/dev/null)" = "$key" ]; then
    printf '  %-24s up to date\n' "$name"
    continue
  fi
  if [ ! -x "$cache/$name" ]; then
    printf '  %-24s building %s ...\n' "$name" "$pkg"
    t0=$SECONDS
    # A ticker so that a 7-minute compile does not look like a hang.
    ( while sleep 30; do printf '  %-24s still building (%ss)\n' "$name" $((SECONDS - t0)); done ) &
    ticker=$!
    if ! (cd "$tools/$dir" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$cache/$name.tmp" "$pkg"); then
      kill "$ticker" 2>/dev/null || true
      echo "build-tools: building $name failed" >&2
      exit 1
    fi
    kill "$ticker" 2>/dev/null || true
    wait "$ticker" 2>/dev/null || true
    mv "$cache/$name.tmp" "$cache/$name"
    printf '  %-24s built in %ss\n' "$name" $((SECONDS - t0))
  else
    printf '  %-24s from cache %s\n' "$name" "$cache"
  fi
  cp -f "$cache/$name" "$bin/$name.tmp" && mv -f "$bin/$name.tmp" "$bin/$name"
  echo "$key" >"$bin/.$name.key"
done
printf 'tools ready in bin/ (%ss)\n' $((SECONDS - start_all))
