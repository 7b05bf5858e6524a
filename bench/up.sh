#!/usr/bin/env bash
# bench/up.sh — print how fast `converge up` starts and stops and how much
# memory it holds, then run bench/envtest (envtest vs. internal/localcp).
# It prints figures and asserts nothing. `make bench` runs it after
# `make tools build`; see bench/README.md for what each figure means.
#
# Environment (all optional):
#   RUNS=3           warm starts after the cold one (and envtest runs)
#   ENVTEST_RUNS=    runs of bench/envtest (default: RUNS); 0 skips it
#   IDLE=10          seconds to let `converge up` idle before measuring RSS
#                    (CPU is measured over the second half)
#   READY_TIMEOUT=180, STOP_TIMEOUT=60   seconds before giving up
#   BENCH_API_PORT=16443 BENCH_ETCD_PORT=12379 (and +1) BENCH_WEBHOOK_PORT=19443
#   BENCH_METRICS_ADDR=127.0.0.1:18080 BENCH_PROBE_ADDR=127.0.0.1:18081
#   BENCH_RECEIVER_ADDR=127.0.0.1:19292 BENCH_ACME_HTTP01_ADDR=127.0.0.1:18089
#     non-default ports, so that the benchmark runs beside a `converge up`.
set -euo pipefail
export LC_ALL=C # a decimal point, not a comma, in $EPOCHREALTIME and awk

cd "$(dirname "$0")/.."
ROOT=$PWD
RUNS=${RUNS:-3}
ENVTEST_RUNS=${ENVTEST_RUNS:-$RUNS}
IDLE=${IDLE:-10}
READY_TIMEOUT=${READY_TIMEOUT:-180}
STOP_TIMEOUT=${STOP_TIMEOUT:-60}
CONVERGE=$ROOT/bin/converge
PORT_ARGS=(
	--port "${BENCH_API_PORT:-16443}"
	--etcd-port "${BENCH_ETCD_PORT:-12379}"
	--webhook-port "${BENCH_WEBHOOK_PORT:-19443}"
	--metrics-bind-address "${BENCH_METRICS_ADDR:-127.0.0.1:18080}"
	--health-probe-bind-address "${BENCH_PROBE_ADDR:-127.0.0.1:18081}"
	--receiver-bind-address "${BENCH_RECEIVER_ADDR:-127.0.0.1:19292}"
	--acme-http01-bind-address "${BENCH_ACME_HTTP01_ADDR:-127.0.0.1:18089}"
)
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok converge)

if [[ ! -x $CONVERGE || ! -x $ROOT/bin/kube-apiserver ]]; then
	echo "bench: bin/converge or the control-plane binaries are missing; run \`make tools build\` (or \`make bench\`)" >&2
	exit 1
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/converge-bench.XXXXXX")
DATA=$TMP/data # the same data directory for the cold and the warm runs
PID=""         # the running converge, if any
SIGNALED=0     # whether it was sent its SIGINT (a second one makes it exit at once, unordered)
# Its own session, so that a Ctrl-C on the terminal reaches only this script,
# which then sends converge the one SIGINT. (setsid execs in place: a
# background job is no process-group leader, so $! stays converge's PID.)
SETSID=()
command -v setsid >/dev/null && SETSID=(setsid)

# ---------------------------------------------------------------- helpers

now() { printf '%s\n' "${EPOCHREALTIME:-$(date +%s.%N)}"; }
# calc EXPR [DECIMALS]; the parentheses keep a ">" in EXPR from being an awk
# output redirection.
calc() { awk "BEGIN { printf \"%.${2:-1}f\", ($1) }"; }
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) printf "%.1f", v[(NR + 1) / 2]; else printf "%.1f", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
alive() { # pid: running (neither gone nor a zombie)
	local stat
	{ read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
	stat=${stat##*) }
	[[ ${stat%% *} != Z ]]
}
# stat_fields pid: sets STATE PPID_ UTIME STIME START from /proc/pid/stat.
stat_fields() {
	local line
	{ read -r line <"/proc/$1/stat"; } 2>/dev/null || return 1
	# shellcheck disable=SC2086 # split the fields after "(comm) "
	set -- ${line##*) }
	STATE=$1 PPID_=$2 UTIME=${12} STIME=${13} START=${20}
}
# tree pid: pid and all its live descendants, one per line.
tree() {
	local -A parent=()
	local p
	for p in /proc/[0-9]*; do
		p=${p#/proc/}
		stat_fields "$p" && [[ $STATE != Z ]] && parent[$p]=$PPID_
	done
	local -a want=("$1") out=()
	while ((${#want[@]})); do
		local cur=${want[0]}
		want=("${want[@]:1}")
		out+=("$cur")
		for p in "${!parent[@]}"; do
			[[ ${parent[$p]} == "$cur" ]] && want+=("$p")
		done
	done
	printf '%s\n' "${out[@]}"
}
name_of() { # pid: basename of argv[0]
	local arg0
	{ IFS= read -r -d '' arg0 <"/proc/$1/cmdline"; } 2>/dev/null || true
	arg0=${arg0##*/}
	printf '%s\n' "${arg0:-?}"
}
rss_kib() {
	local k v _
	while read -r k v _; do
		[[ $k == VmRSS: ]] && { echo "$v"; return; }
	done 2>/dev/null <"/proc/$1/status"
	echo 0
}
# data_users: pids (not ours) whose command line names the data directory —
# the components of our converge; whatever is left after it exits is orphaned.
data_users() {
	local p arg
	local -a args
	for p in /proc/[0-9]*; do
		p=${p#/proc/}
		[[ $p == "$$" || $p == "$BASHPID" ]] && continue
		mapfile -d '' args 2>/dev/null <"/proc/$p/cmdline" || continue
		for arg in "${args[@]}"; do
			if [[ $arg == "$DATA" || $arg == *"$DATA/"* ]]; then
				echo "$p"
				break
			fi
		done
	done
}
# cpu_ticks pids...: "pid ticks" lines, ticks = utime+stime.
cpu_ticks() {
	local p
	for p in "$@"; do
		stat_fields "$p" && echo "$p $((UTIME + STIME))"
	done
}

# fail MESSAGE OUTPUT: print both, keep the component logs, exit 1.
fail() {
	echo "bench: $1" >&2
	sed 's/^/    /' "$2" >&2
	if [[ -d $DATA/logs ]]; then
		local keep
		keep=$(mktemp -d "${TMPDIR:-/tmp}/converge-bench-logs.XXXXXX")
		cp -r "$DATA/logs/." "$keep/"
		echo "bench: component logs kept in $keep" >&2
	fi
	exit 1
}

cleanup() {
	local rc=$? p
	trap - EXIT INT TERM HUP
	if [[ -n $PID ]] && alive "$PID"; then
		((SIGNALED)) || kill -INT "$PID" 2>/dev/null || true
		for _ in $(seq 1 200); do alive "$PID" || break; sleep 0.1; done
		alive "$PID" && kill -KILL "$PID" 2>/dev/null
	fi
	for p in $(data_users); do kill -KILL "$p" 2>/dev/null || true; done
	rm -rf "$TMP"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# ---------------------------------------------------------------- one run

# run LABEL: start `converge up` on $DATA, wait until ready, idle, measure
# memory and CPU, stop with SIGINT, look for leftovers. Appends to the R_*
# arrays and prints one block.
R_WALL=() R_SELF=() R_LOCK=() R_NET=() R_STOP=() R_RSS=() R_CPU=() R_ORPHANS=() R_RC=()
declare -A RSS_BY  # "label/component" -> MiB
declare -A STOP_BY # component -> seconds after SIGINT it was gone, one per run
run() {
	local label=$1 out=$TMP/out.$1
	local t0 t1 self="" line
	: >"$out"
	t0=$(now)
	"${SETSID[@]}" "$CONVERGE" up --data-dir "$DATA" "${PORT_ARGS[@]}" >"$out" 2>&1 &
	PID=$! SIGNALED=0
	while :; do
		if line=$(grep -m1 -o 'Converge is up (ready in [0-9.]*s)' "$out"); then
			t1=$(now)
			self=${line#*ready in }
			self=${self%s)}
			break
		fi
		alive "$PID" || fail "converge up ($label) exited before it was ready:" "$out"
		(($(calc "$(now) - $t0 > $READY_TIMEOUT" 0))) && fail "converge up ($label) not ready after ${READY_TIMEOUT}s:" "$out"
		sleep 0.02
	done
	local wall
	wall=$(calc "$t1 - $t0" 2)
	# Time spent waiting for another local control plane (a test suite, a
	# `converge up`) to finish starting: localcp serialises their bootstrap.
	local lockwait=0
	if grep -q 'waiting for another local control plane' "$out"; then
		lockwait=$(sed -n 's/^ *\[ *\([0-9.]*\)s\] starting etcd$/\1/p' "$out" | head -1)
		lockwait=${lockwait:-0}
	fi
	if [[ $(name_of "$PID") != "${CONVERGE##*/}" ]]; then
		echo "bench: pid $PID is $(name_of "$PID"), not converge" >&2
		exit 1
	fi

	# Idle: CPU over the second half of the idle time, RSS at its end.
	sleep "$(calc "$IDLE / 2" 2)"
	local -a pids
	mapfile -t pids < <(tree "$PID")
	local ct0 ct1 p t n
	local -A ticks0=() dticks=()
	while read -r p t; do ticks0[$p]=$t; done < <(cpu_ticks "${pids[@]}")
	ct0=$(now)
	sleep "$(calc "$IDLE / 2" 2)"
	mapfile -t pids < <(tree "$PID")
	ct1=$(now)
	local dtotal=0
	while read -r p t; do
		t=$((t - ${ticks0[$p]:-0}))
		dtotal=$((dtotal + t))
		n=$(name_of "$p")
		dticks[$n]=$((${dticks[$n]:-0} + t))
	done < <(cpu_ticks "${pids[@]}")
	local hz cpu cpu_by=""
	hz=$(getconf CLK_TCK)
	cpu=$(calc "100 * $dtotal / $hz / ($ct1 - $ct0)" 0)
	for n in "${COMPONENTS[@]}"; do
		[[ -n ${dticks[$n]:-} ]] && cpu_by+="${cpu_by:+, }$n $(calc "100 * ${dticks[$n]} / $hz / ($ct1 - $ct0)" 0)"
	done
	local -A kib=()
	local total=0
	for p in "${pids[@]}"; do
		n=$(name_of "$p")
		kib[$n]=$((${kib[$n]:-0} + $(rss_kib "$p")))
	done
	local breakdown=""
	for n in "${COMPONENTS[@]}" "${!kib[@]}"; do
		[[ -n ${kib[$n]:-} ]] || continue
		total=$((total + kib[$n]))
		RSS_BY[$label/$n]=$(calc "${kib[$n]} / 1024" 0)
		breakdown+="${breakdown:+, }$n ${RSS_BY[$label/$n]}"
		unset "kib[$n]"
	done
	local total_mib
	total_mib=$(calc "$total / 1024" 0)

	# Remember the tree (pid + start time) to find leftovers after the stop.
	local -a before=()
	for p in "${pids[@]}"; do
		stat_fields "$p" && before+=("$p:$START:$(name_of "$p")")
	done

	# Stop, noting when each process of the tree is gone.
	local s0 s1 rc=0 entry start
	local -A gone=()
	s0=$(now)
	SIGNALED=1
	kill -INT "$PID"
	local tick exited
	while :; do
		tick=$(now) exited=0
		alive "$PID" || exited=1 # first, so that the pass below sees it gone
		for entry in "${before[@]}"; do
			IFS=: read -r p start n <<<"$entry"
			[[ -z ${gone[$n]:-} ]] && ! alive "$p" && gone[$n]=$(calc "$tick - $s0" 2)
		done
		((exited)) && break
		if (($(calc "$(now) - $s0 > $STOP_TIMEOUT" 0))); then
			echo "bench: converge up ($label) still running ${STOP_TIMEOUT}s after SIGINT; killing it" >&2
			kill -KILL "$PID"
			break
		fi
		sleep 0.02
	done
	s1=$(now)
	local stop_order
	stop_order=$(for n in "${!gone[@]}"; do echo "${gone[$n]} $n"; done | sort -g | awk '{ printf "%s%s %s", (NR > 1 ? ", " : ""), $2, $1 }')
	for n in "${!gone[@]}"; do STOP_BY[$n]+="${gone[$n]} "; done
	wait "$PID" || rc=$?
	PID=""
	local stop
	stop=$(calc "$s1 - $s0" 2)

	# Leftovers: anything of the old tree still alive, or anything naming the
	# data directory. Checked at once, and again a second later.
	local -a left=()
	for _ in 1 2; do
		left=()
		for entry in "${before[@]}"; do
			IFS=: read -r p start n <<<"$entry"
			if stat_fields "$p" && [[ $START == "$start" && $STATE != Z ]]; then
				left+=("$n($p)")
			fi
		done
		for p in $(data_users); do
			[[ " ${left[*]} " == *"($p) "* ]] || left+=("$(name_of "$p")($p)")
		done
		((${#left[@]})) || break
		sleep 1
	done
	local orphans=${#left[@]}
	((orphans)) && orphans="${#left[@]}: ${left[*]}"

	R_WALL+=("$wall") R_SELF+=("$self") R_LOCK+=("$lockwait") R_NET+=("$(calc "$wall - $lockwait" 2)") R_STOP+=("$stop") R_RSS+=("$total_mib") R_CPU+=("$cpu")
	R_ORPHANS+=("$orphans") R_RC+=("$rc")
	RSS_BY[$label/total]=$total_mib
	local phases
	phases=$(sed -n 's/^ *\[ *\([0-9.]*\)s\] \(.*\)$/\2 @\1s/p' "$out" | paste -sd ';' - | sed 's/;/; /g')
	local waited=""
	(($(calc "$lockwait > 0" 0))) && waited="; $lockwait s of it waiting for another control plane to start"
	printf '%-7s up %5.2f s (self-reported %s s%s); idle: RSS %s MiB (MiB per process: %s), CPU %s%% of one core (%s)\n' \
		"$label" "$wall" "$self" "$waited" "$total_mib" "$breakdown" "$cpu" "$cpu_by"
	printf '        stop %5.2f s (exit %s; gone after: %s); orphans: %s\n' "$stop" "$rc" "$stop_order" "$orphans"
	printf '        steps: %s\n' "$phases"
}

# ---------------------------------------------------------------- main

echo "== converge up benchmark: $(date '+%Y-%m-%d %H:%M'), $(nproc) CPU(s), $(git describe --tags --always --dirty 2>/dev/null || echo '?')"
echo "   load average before: $(cut -d' ' -f1-3 /proc/loadavg); data dir $DATA; ports ${PORT_ARGS[*]}"
run cold
for i in $(seq 1 "$RUNS"); do
	run "warm$i"
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

ENVTEST_RC=0
if ((ENVTEST_RUNS > 0)); then
	echo
	echo "== go run ./bench/envtest -runs $ENVTEST_RUNS"
	go run ./bench/envtest -runs "$ENVTEST_RUNS" -bin-dir "$ROOT/bin" >"$TMP/envtest.txt" || ENVTEST_RC=$?
	cat "$TMP/envtest.txt"
fi

# ---------------------------------------------------------------- table

warm_wall=("${R_WALL[@]:1}") warm_self=("${R_SELF[@]:1}") warm_rss=("${R_RSS[@]:1}") warm_cpu=("${R_CPU[@]:1}")
orphans_total=0
for o in "${R_ORPHANS[@]}"; do orphans_total=$((orphans_total + ${o%%:*})); done
rc_list=$(printf '%s\n' "${R_RC[@]}" | sort -u | paste -sd, -)
breakdown=""
for n in "${COMPONENTS[@]}"; do
	[[ -n ${RSS_BY[cold/$n]:-} ]] && breakdown+="${breakdown:+, }$n ${RSS_BY[cold/$n]}"
done

echo
echo "== summary ($(nproc) CPU(s); load average ${LOAD_AFTER} after the converge up runs)"
printf '%-21s %-5s %s s (self-reported %s s)\n' "converge up" cold "$(calc "${R_WALL[0]}")" "$(calc "${R_SELF[0]}")"
if ((RUNS > 0)); then
	printf '%-21s %-5s median %s s over %d runs (%s); self-reported median %s s\n' "converge up" warm \
		"$(median "${warm_wall[@]}")" "$RUNS" "$(for w in "${warm_wall[@]}"; do calc "$w"; echo; done | paste -sd' ' -)" \
		"$(median "${warm_self[@]}")"
fi
lock_total=$(printf '%s\n' "${R_LOCK[@]}" | awk '{ t += $1 } END { printf "%.1f", t }')
if (($(calc "$lock_total > 0" 0))); then
	warm_net=("${R_NET[@]:1}")
	printf '%-27s %s s (cold), %s s (warm): time spent waiting for another local control plane to finish\n' \
		"start-lock waits" "$(calc "${R_LOCK[0]}")" "$(for w in "${R_LOCK[@]:1}"; do calc "$w"; echo; done | paste -sd' ' -)"
	printf '%-27s starting (included above); without them: cold %s s, warm median %s s\n' "" \
		"$(calc "${R_NET[0]}")" "$( ((RUNS > 0)) && median "${warm_net[@]}" || echo -)"
fi
printf '%-27s median %s s over %d runs (%s); exit codes %s\n' "stop (SIGINT)" "$(median "${R_STOP[@]}")" "${#R_STOP[@]}" \
	"$(for s in "${R_STOP[@]}"; do calc "$s"; echo; done | paste -sd' ' -)" "$rc_list"
stop_by=""
for n in "${COMPONENTS[@]}"; do
	# shellcheck disable=SC2086 # one figure per run
	[[ -n ${STOP_BY[$n]:-} ]] && stop_by+="${stop_by:+, }$n $(median ${STOP_BY[$n]})"
done
printf '%-27s median time until each is gone: %s\n' "" "$stop_by"
printf '%-27s %s MiB cold (MiB per process: %s)' "idle RSS (tree)" "${R_RSS[0]}" "$breakdown"
((RUNS > 0)) && printf '; warm median %s MiB' "$(median "${warm_rss[@]}" | cut -d. -f1)"
echo
printf '%-27s %s%% of one core cold' "idle CPU (tree)" "${R_CPU[0]}"
((RUNS > 0)) && printf '; warm median %s%%' "$(median "${warm_cpu[@]}" | cut -d. -f1)"
echo
if ((orphans_total == 0)); then
	printf '%-27s 0\n' "orphans after stop"
else
	printf '%-27s %s\n' "orphans after stop" "$(printf '%s; ' "${R_ORPHANS[@]}")"
fi
# Machine-readable lines for bench/table (see bench/internal/benchout).
echo "BENCH up.cold_start $(calc "${R_WALL[0]}" 2) s"
((RUNS > 0)) && echo "BENCH up.warm_start_median $(median "${warm_wall[@]}") s"
echo "BENCH up.stop_median $(median "${R_STOP[@]}") s"
echo "BENCH up.idle_rss_tree_cold ${R_RSS[0]} MiB"
# The converge process: the manager, the load balancer agent and up itself.
[[ -n ${RSS_BY[cold/converge]:-} ]] && echo "BENCH up.idle_rss_manager_cold ${RSS_BY[cold/converge]} MiB"
if ((ENVTEST_RUNS > 0)); then
	sed 1d "$TMP/envtest.txt" | sed 's/^  //' | while IFS= read -r l; do printf '%s\n' "$l"; done
	((ENVTEST_RC == 0)) || echo "bench/envtest FAILED (exit $ENVTEST_RC); see above"
fi
exit "$ENVTEST_RC"
