#!/usr/bin/env bash
# verify.sh regenerates everything (code, CRDs, RBAC, webhooks, chart copies,
# go.mod/go.sum of every module) and fails if that changed the tree: the
# generated files in the commit are out of date. Uncommitted edits of your own
# do not fail it; only what generation changes does.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
snapshot() { { git status --porcelain=v1 --untracked-files=all -- . ':!bin'; git diff -- . ':!bin'; git ls-files -o --exclude-standard -z | xargs -0 -r sha256sum; } | sha256sum; }
before=$(snapshot)
make --no-print-directory generate >/dev/null
go mod tidy
for m in hack/tools hack/tools/lint hack/tools/helm examples/kitchen; do (cd "$m" && go mod tidy); done
after=$(snapshot)
if [ "$before" != "$after" ]; then
  echo "verify: 'make generate' / 'go mod tidy' changed the tree; commit the regenerated files:" >&2
  git status --short -- . ':!bin' >&2
  exit 1
fi
echo "verify: generated files are up to date"
# Every fuzz target in the tree is fuzzed by `make fuzz` (.ci/run): a target
# missing from FUZZ_TARGETS would only ever run its seeds.
listed=$(make --no-print-directory -s -f Makefile -f - print-fuzz-targets <<'MK' | tr ' ' '\n' | sed '/^$/d' | sort
print-fuzz-targets: ; @echo $(FUZZ_TARGETS)
MK
)
found=$(grep -rl --include='*_test.go' '^func Fuzz' internal pkg cmd 2>/dev/null | while read -r f; do
  for n in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$f"); do echo "./$(dirname "$f"):$n"; done
done | sort)
if [ "$listed" != "$found" ]; then
  echo "verify: FUZZ_TARGETS in the Makefile differs from the fuzz targets in the tree:" >&2
  diff <(echo "$listed") <(echo "$found") >&2 || true
  exit 1
fi
echo "verify: make fuzz covers every fuzz target"
