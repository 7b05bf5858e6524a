#!/usr/bin/env bash
# bench/all.sh — run every benchmark in turn with documented sizes (about
# 15-25 minutes on 2 cores), keep each one's output, and print one table of
# their BENCH lines compared with the baseline in bench/README.md
# (bench/table flags any figure more than 20 % worse). `make bench` runs it
# after `make tools build`.
#
# Environment (all optional): the sizes below, e.g. WORKLOADS_REPLICAS=1000;
# SKIP="databases fairness" skips benchmarks by name; BENCH_LOG_DIR keeps
# the logs there (default: a new temporary directory, printed at the end);
# WRITE_BASELINE=1 replaces the README's baseline with this run.
set -uo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
export CONVERGE_BIN_DIR=${CONVERGE_BIN_DIR:-$PWD/bin}

UP_RUNS=${UP_RUNS:-1}
WORKLOADS_REPLICAS=${WORKLOADS_REPLICAS:-500}
WORKLOADS_RUNS=${WORKLOADS_RUNS:-1}
GITOPS_ARGS=${GITOPS_ARGS:--objects 1000 -syncs 100 -edits 100 -pushes 20 -inventory 10000}
DATABASES_ARGS=${DATABASES_ARGS:--n 100 -rss-n 1000}
FAIRNESS_ARGS=${FAIRNESS_ARGS:--objects 5000 -replicas 100 -runs 3}
FAILOVER_ARGS=${FAILOVER_ARGS:--objects 1000 -kills 5 -terms 5}
LOADBALANCER_ARGS=${LOADBALANCER_ARGS:--services 100 -kills 20 -wrk 5s}
MACHINES_ARGS=${MACHINES_ARGS:--n 1000 -qemu 5}
CERTIFICATES_ARGS=${CERTIFICATES_ARGS:--n 1000 -secrets 10000}
CERTIFICATES_ALL_ARGS=${CERTIFICATES_ALL_ARGS:--n 1000 -secrets 10000 -all-secret-data}
CERTIFICATES_RSA_ARGS=${CERTIFICATES_RSA_ARGS:--n 1000 -secrets 0 -algorithm RSA}
DHCP_ARGS=${DHCP_ARGS:--n 2000 -c 32}
BMC_ARGS=${BMC_ARGS:--n 100 -rss-n 1000}
UPGRADE_ARGS=${UPGRADE_ARGS:--n 100 -max 1,10,25}
WHY_ARGS=${WHY_ARGS:--nodes 1000 -objects 10000}
SCALE_ARGS=${SCALE_ARGS:--syncs 10 -objects-per-sync 100 -pods 1000 -deployments 10 -certificates 1000 -machines 100 -bmcs 100 -upgrade 100 -databases 100 -drops 5 -edits 20 -pushes 20 -rest 30s}
SKIP=${SKIP:-}
LOGS=${BENCH_LOG_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/converge-bench-all.XXXXXX")}
mkdir -p "$LOGS"

echo "== make bench: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPU(s), commit $(git describe --always --dirty 2>/dev/null || echo '?'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
failed=()
bench() { # name command...
	local name=$1
	shift
	if [[ " $SKIP " == *" $name "* ]]; then
		echo "== $name: skipped"
		return
	fi
	echo
	echo "== $name: $* (load average $(cut -d' ' -f1-3 /proc/loadavg))"
	local t0=$SECONDS
	if "$@" 2>"$LOGS/$name.err" | tee "$LOGS/$name.log"; then
		echo "== $name: done in $((SECONDS - t0)) s"
	else
		echo "== $name: FAILED after $((SECONDS - t0)) s; stderr in $LOGS/$name.err:"
		tail -20 "$LOGS/$name.err"
		failed+=("$name")
	fi
}

bench up env RUNS="$UP_RUNS" bench/up.sh
# shellcheck disable=SC2086 # the *_ARGS are word lists
{
	bench workloads go run ./bench/workloads -replicas "$WORKLOADS_REPLICAS" -runs "$WORKLOADS_RUNS"
	bench gitops go run ./bench/gitops $GITOPS_ARGS
	bench databases go run ./bench/databases $DATABASES_ARGS
	bench fairness go run ./bench/fairness $FAIRNESS_ARGS
	bench failover go run ./bench/failover $FAILOVER_ARGS
	bench loadbalancer go run ./bench/loadbalancer $LOADBALANCER_ARGS
	bench machines go run ./bench/machines $MACHINES_ARGS
	bench certificates go run ./bench/certificates $CERTIFICATES_ARGS
	bench certificates-all-secrets go run ./bench/certificates $CERTIFICATES_ALL_ARGS
	bench certificates-rsa go run ./bench/certificates $CERTIFICATES_RSA_ARGS
	bench dhcp go run ./bench/dhcp $DHCP_ARGS
	bench bmc go run ./bench/bmc $BMC_ARGS
	bench upgrade go run ./bench/upgrade $UPGRADE_ARGS
	bench why go run ./bench/why $WHY_ARGS
	bench scale go run ./bench/scale $SCALE_ARGS
}

echo
echo "== all benchmarks: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git describe --always --dirty 2>/dev/null || echo '?'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
table_args=()
[[ ${WRITE_BASELINE:-0} == 1 ]] && table_args+=(-write)
go run ./bench/table "${table_args[@]}" "$LOGS"/*.log
echo "logs: $LOGS"
if ((${#failed[@]})); then
	echo "FAILED: ${failed[*]}"
	exit 1
fi
