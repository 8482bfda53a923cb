#!/usr/bin/env bash
# nsgate's benchmark: nsgate side by side with kernel loopback, a minimal
# userspace TCP proxy, slirp4netns and pasta, in one run, interleaved.
# `make bench` runs it after `make build`.
#
# Everything runs inside one sealed network namespace that this script
# creates (unshare --net; only lo, plus for pasta a veth pair whose two ends
# both stay inside): the "host side" of every helper is that namespace, and
# the servers (iperf3, connbench's HTTP/1.0 server) listen on its 127.0.0.1.
# No packet leaves the machine (see TESTING.md).
#
# Cases (each a fresh helper per measurement):
#   loopback     the client runs directly in the sealed namespace
#   proxy        `connbench proxy` relays 127.0.0.2:5201 and 127.0.0.2:8080
#                to the servers on 127.0.0.1; the client runs directly in
#                the sealed namespace and connects to 127.0.0.2. This is the
#                floor for any gateway that terminates the worker's TCP
#                connection and dials a new one, as nsgate must (decide,
#                dial, then complete): accept, dial, splice both ways, no
#                policy and no TUN. nsgate's distance to it is the cost of
#                its userspace TCP/IP stack, TUN and policy, not of relaying.
#   nsgate       bin/nsgate run --policy bench/policy.yaml --audit FILE -- CLIENT
#                (CLIENT reaches the servers by the name bench.test)
#   slirp4netns  slirp4netns --configure --mtu=65520 on a fresh netns; the
#                client connects to 10.0.2.2 (host loopback)
#   pasta        pasta --config-net; the client connects to the gateway
#                address, which pasta maps to host loopback
#
# Metrics: iperf3 up (client sends) and down (-R), single stream; connection
# rate (dial + HTTP/1.0 GET + read to EOF + close) with 1 and 4 clients;
# the helper's peak RSS (VmHWM) and CPU time in each of those runs, and in
# the connection runs its CPU per connection split into user space and
# kernel (connN_user_us, connN_sys_us: the kernel part is the work inside
# the helper's system calls, which any helper pays, the user part is its
# own code); peak
# RSS after a connection churn; RSS while holding many idle TCP flows
# (idle_held_rss_mib, sampled 1 s after all are open) and the peak over
# that whole run, including the end when the worker exits with all of
# them open and the helper tears them down (idle_rss_mib); and
# the start-up time of `nsgate run -- true` beside `pasta --config-net`,
# `bwrap --unshare-all` and bare `unshare` (interleaved, as an ordinary
# user); and the latency one request feels (`connbench latency` against
# `connbench lserve`, which answers a 64-byte HTTP request with a 100-byte
# head and then a 1,000-byte body, written separately): lat_keep_* is one
# request's round trip on a kept-alive connection, lat_fresh_* a fresh
# connection's dial, request and first byte, each as p50/p99/p999 over
# BENCH_LAT_N requests in µs (the table shows the median of the reps'
# percentiles). The
# "nsgate ratios" column divides nsgate's medians by those of loopback,
# proxy, slirp4netns and pasta.
#
# Environment:
#   BENCH_REPS=3          repetitions (results are medians with min..max)
#   BENCH_SECS=10         seconds per iperf3 and connection-rate run
#   BENCH_CHURN_SECS=30   seconds of the churn run (0 skips it)
#   BENCH_IDLE_FLOWS=10000 idle TCP flows held (0 skips the idle run)
#   BENCH_STARTS=20       start-up samples (each: nsgate, pasta, bwrap, unshare)
#   BENCH_START_USER=nsgate-test  who starts them (root if no such user)
#   BENCH_LAT_N=2000      requests per latency run (each mode, case, rep)
#   BENCH_LAT_MODES="keep fresh"  which latency runs (one of them, for a
#                         profile of one: NSGATE_CPUPROFILE)
#   BENCH_ONLY="start"    run only these sections (space- or comma-
#                         separated): data (throughput, rates, memory),
#                         start (start-up), latency; default all. The short
#                         quiet run: BENCH_ONLY=latency,start
#   BENCH_CASES="loopback proxy nsgate slirp4netns pasta"
#   BENCH_NSGATE=bin/nsgate   the nsgate binary under test
#   BENCH_NSGATE_ARGS=""      extra `nsgate run` flags
#   BENCH_OUT=DIR         keep raw results (results.tsv) and logs in DIR
#
# Needs root (for unshare --net), iperf3, slirp4netns and pasta (package
# passt); missing packages are installed with apt-get when possible.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)

REPS=${BENCH_REPS:-3}
SECS=${BENCH_SECS:-10}
CHURN_SECS=${BENCH_CHURN_SECS:-30}
IDLE_FLOWS=${BENCH_IDLE_FLOWS:-10000}
STARTS=${BENCH_STARTS:-20}
LAT_N=${BENCH_LAT_N:-2000}
LAT_MODES=${BENCH_LAT_MODES:-keep fresh}
ONLY=${BENCH_ONLY:-}
CASES=${BENCH_CASES:-"loopback proxy nsgate slirp4netns pasta"}
NSGATE=${BENCH_NSGATE:-$root/bin/nsgate}
NSGATE_ARGS=${BENCH_NSGATE_ARGS:-}

die() { echo "bench: $*" >&2; exit 1; }
say() { echo "bench: $*" >&2; }
for sect in ${ONLY//,/ }; do
	case $sect in data | start | latency) ;; *) die "BENCH_ONLY: unknown section $sect (data, start, latency)" ;; esac
done

# ---------------------------------------------------------------- outside
if [ "${1:-}" != "--inside" ]; then
	[ "$(id -u)" = 0 ] || die "run as root: the benchmark makes its own sealed network namespace (unshare --net)"
	case "$NSGATE" in /*) ;; *) NSGATE="$root/$NSGATE" ;; esac
	[ -x "$NSGATE" ] || die "$NSGATE not built (make build)"
	missing=()
	command -v iperf3 >/dev/null || missing+=(iperf3)
	command -v slirp4netns >/dev/null || missing+=(slirp4netns)
	command -v pasta >/dev/null || missing+=(passt)
	command -v bwrap >/dev/null || missing+=(bubblewrap)
	if [ ${#missing[@]} -gt 0 ]; then
		say "installing ${missing[*]}"
		command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get to install them"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 ||
			{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; } ||
			die "could not install ${missing[*]}"
	fi
	work=$(mktemp -d /tmp/nsgate-bench.XXXXXX)
	chmod 0755 "$work"
	trap 'rm -rf "$work"' EXIT
	say "building connbench"
	(cd "$root" && CGO_ENABLED=0 go build -o "$work/connbench" ./bench/connbench) || die "build connbench"
	export BENCH_WORK=$work NSGATE
	# unshare --net: a new, empty network namespace; --fork so that the
	# script is its namespace's only inhabitant until it starts servers.
	unshare --net --fork -- "$0" --inside
	exit $?
fi

# ----------------------------------------------------------------- inside
work=${BENCH_WORK:?}
cb=$work/connbench
out=${BENCH_OUT:-$work/out}
mkdir -p "$out"
res=$out/results.tsv
: >"$res"

# The safety rule: refuse to start servers unless sealed.
[ "$(readlink /proc/self/ns/net)" != "$(readlink /proc/1/ns/net)" ] || die "still in the initial network namespace"
others=$(ip -o link show | awk -F': ' '{print $2}' | grep -vx lo || true)
[ -z "$others" ] || die "unexpected interfaces in the sealed namespace: $others"
ip link set lo up
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT

iperf3 -s -B 127.0.0.1 -p 5201 >"$out/iperf3-server.log" 2>&1 &
pids+=($!)
"$cb" serve -addr 127.0.0.1:8080 >"$out/connbench-server.log" 2>&1 &
pids+=($!)
"$cb" lserve -addr 127.0.0.1:8081 >"$out/connbench-lserve.log" 2>&1 &
pids+=($!)

# pasta needs a template interface with a default route: a veth pair whose
# ends both stay in this namespace (nothing routes anywhere else).
if [[ " $CASES " == *" pasta "* ]]; then
	ip link add nsbench0 type veth peer name nsbench1
	ip addr add 192.0.2.1/24 dev nsbench0
	ip link set nsbench0 up
	ip link set nsbench1 up
	ip route add default via 192.0.2.2 dev nsbench0
fi
for _ in $(seq 50); do
	(exec 3<>/dev/tcp/127.0.0.1/8080) 2>/dev/null && (exec 3<>/dev/tcp/127.0.0.1/5201) 2>/dev/null &&
		(exec 3<>/dev/tcp/127.0.0.1/8081) 2>/dev/null && break
	sleep 0.1
done

policy=$root/bench/policy.yaml
audit=$work/audit.jsonl

# watch PID [LOG]: record the peak VmHWM (KiB) and CPU ticks of PID until
# it exits, into $work/watch.$PID; with LOG, also its VmRSS 1 s after LOG
# shows "held=" (the idle flows are all open); prints nothing.
watch_proc() {
	local pid=$1 log=${2:-} f=$work/watch.$1 hwm=0 cpu="0 0" held=0 line
	while [ -e "/proc/$pid/status" ]; do
		line=$(awk '/^VmHWM:/{print $2}' "/proc/$pid/status" 2>/dev/null || true)
		[ -n "$line" ] && [ "$line" -gt "$hwm" ] && hwm=$line
		line=$(awk '{print $14, $15}' "/proc/$pid/stat" 2>/dev/null || true)
		[ -n "$line" ] && cpu=$line
		if [ -n "$log" ] && [ "$held" = 0 ] && grep -q '^held=' "$log" 2>/dev/null; then
			sleep 1
			held=$(awk '/^VmRSS:/{print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
		fi
		echo "$hwm $held $cpu" >"$f"
		sleep 0.2
	done
}

# record CASE METRIC VALUE
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$res"; }

clk=$(getconf CLK_TCK)

# helper_stats CASE PREFIX PID WALL [COUNT]: records PREFIX_rss_mib and
# PREFIX_cpu_pct (helper CPU time over the run's wall time, in % of one
# core); with COUNT (connections made), also PREFIX_user_us and
# PREFIX_sys_us, the helper's CPU per connection in user space and in the
# kernel (its system calls, the packets it writes running the receiver's
# stack).
helper_stats() {
	local c=$1 p=$2 pid=$3 wall=$4 n=${5:-} hwm cpu held ut st
	[ -f "$work/watch.$pid" ] || return 0
	read -r hwm held ut st <"$work/watch.$pid"
	cpu=$((ut + st))
	if [ -n "$n" ] && [ "$n" -gt 0 ]; then
		record "$c" "${p}_user_us" "$(awk -v t="$ut" -v hz="$clk" -v n="$n" 'BEGIN{printf "%.0f", 1e6*t/hz/n}')"
		record "$c" "${p}_sys_us" "$(awk -v t="$st" -v hz="$clk" -v n="$n" 'BEGIN{printf "%.0f", 1e6*t/hz/n}')"
	fi
	record "$c" "${p}_rss_mib" "$(awk -v k="$hwm" 'BEGIN{printf "%.1f", k/1024}')"
	if [ "${held:-0}" != 0 ]; then
		record "$c" "${p}_held_rss_mib" "$(awk -v k="$held" 'BEGIN{printf "%.1f", k/1024}')"
	fi
	record "$c" "${p}_cpu_pct" "$(awk -v t="$cpu" -v hz="$clk" -v w="$wall" 'BEGIN{printf "%.0f", 100*t/hz/w}')"
	rm -f "$work/watch.$pid"
}

# in_case CASE CMD...: runs CMD as the client of CASE, with $TARGET_IP set
# to the address the client uses; sets $helper to the helper's PID (empty
# for loopback) and waits for it.
target_of() {
	case $1 in
	loopback) echo 127.0.0.1 ;;
	proxy) echo 127.0.0.2 ;;
	nsgate) echo bench.test ;;
	slirp4netns) echo 10.0.2.2 ;;
	pasta) echo 192.0.2.2 ;;
	esac
}

# run_client CASE LOG CMD...: runs the client command in CASE, output to
# LOG; sets $helper_pid and $wall (seconds).
run_client() {
	local c=$1 log=$2
	shift 2
	local t0 t1 ns_pid slirp_pid
	helper_pid=""
	t0=$(date +%s.%N)
	case $c in
	loopback)
		"$@" >"$log" 2>&1 || true
		;;
	proxy)
		"$cb" proxy -map 127.0.0.2:5201=127.0.0.1:5201 -map 127.0.0.2:8080=127.0.0.1:8080 -map 127.0.0.2:8081=127.0.0.1:8081 >"$log.proxy" 2>&1 &
		helper_pid=$!
		for _ in $(seq 100); do grep -qx listening "$log.proxy" 2>/dev/null && break; sleep 0.02; done
		watch_proc "$helper_pid" "$log" &
		t0=$(date +%s.%N)
		"$@" >"$log" 2>&1 || true
		sleep 0.3 # let the watcher take a last sample
		kill "$helper_pid" 2>/dev/null || true
		wait "$helper_pid" 2>/dev/null || true
		;;
	nsgate)
		rm -f "$audit"
		# shellcheck disable=SC2086
		"$NSGATE" run $NSGATE_ARGS --policy "$policy" --audit "$audit" -- "$@" >"$log" 2>&1 &
		helper_pid=$!
		watch_proc "$helper_pid" "$log" &
		wait "$helper_pid" || true
		;;
	slirp4netns)
		unshare --net -- sleep 100000 &
		ns_pid=$!
		sleep 0.1
		slirp4netns --configure --mtu=65520 "$ns_pid" tap0 >"$log.slirp" 2>&1 &
		slirp_pid=$!
		helper_pid=$slirp_pid
		for _ in $(seq 100); do
			nsenter -t "$ns_pid" -n ip -4 addr show tap0 2>/dev/null | grep -q 10.0.2.100 && break
			sleep 0.05
		done
		watch_proc "$slirp_pid" "$log" &
		t0=$(date +%s.%N)
		nsenter -t "$ns_pid" -n -- "$@" >"$log" 2>&1 || true
		sleep 0.3 # let the watcher take a last sample
		kill "$slirp_pid" "$ns_pid" 2>/dev/null || true
		wait "$slirp_pid" "$ns_pid" 2>/dev/null || true
		;;
	pasta)
		rm -f "$work/pasta.pid"
		# --runas 0: pasta would drop to nobody, which cannot run here.
		pasta --runas 0 -q -4 -f -P "$work/pasta.pid" --config-net -- "$@" >"$log" 2>"$log.pasta" &
		local pp=$!
		for _ in $(seq 100); do [ -s "$work/pasta.pid" ] && break; sleep 0.02; done
		helper_pid=$(cat "$work/pasta.pid" 2>/dev/null || echo "$pp")
		watch_proc "$helper_pid" "$log" &
		wait "$pp" || true
		;;
	esac
	t1=$(date +%s.%N)
	wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')
	sleep 0.3
}

iperf_rate() { # LOG -> Gbit/s of the receiver line
	awk '/receiver/{for(i=1;i<=NF;i++) if($i ~ /bits\/sec/){v=$(i-1); u=$i}} END{
		if(v=="") exit; if(u ~ /^Gbits/) print v; else if(u ~ /^Mbits/) printf "%.3f\n", v/1000; else if(u ~ /^Kbits/) printf "%.6f\n", v/1e6; else print 0}' "$1"
}

measure() { # CASE REP
	local c=$1 rep=$2 tgt log v n
	tgt=$(target_of "$c")
	for dir in up down; do
		log=$out/$c.iperf-$dir.$rep.log
		local extra=()
		if [ $dir = down ]; then extra=(-R); fi
		run_client "$c" "$log" iperf3 -4 -f g -c "$tgt" -p 5201 -t "$SECS" "${extra[@]}"
		v=$(iperf_rate "$log")
		if [ -n "$v" ]; then record "$c" "$dir" "$v"; else say "$c $dir: no result (see $log)"; fi
		if [ -n "$helper_pid" ]; then helper_stats "$c" "$dir" "$helper_pid" "$wall"; fi
	done
	for par in 1 4; do
		log=$out/$c.conn-$par.$rep.log
		run_client "$c" "$log" "$cb" rate -4 -addr "$tgt:8080" -c "$par" -t "${SECS}s"
		v=$(sed -n 's/.* rate=\([0-9.]*\).*/\1/p' "$log" | tail -1)
		if [ -n "$v" ]; then record "$c" "conn$par" "$v"; else say "$c conn$par: no result (see $log)"; fi
		n=$(sed -n 's/^conns=\([0-9]*\) .*/\1/p' "$log" | tail -1)
		if [ -n "$helper_pid" ]; then helper_stats "$c" "conn$par" "$helper_pid" "$wall" "$n"; fi
	done
}

measure_mem() { # CASE REP: churn and idle flows (helpers only)
	local c=$1 rep=$2 tgt log v
	tgt=$(target_of "$c")
	if [ "$CHURN_SECS" != 0 ]; then
		log=$out/$c.churn.$rep.log
		run_client "$c" "$log" "$cb" rate -4 -addr "$tgt:8080" -c 4 -t "${CHURN_SECS}s"
		if [ -n "$helper_pid" ]; then helper_stats "$c" churn "$helper_pid" "$wall"; fi
	fi
	if [ "$IDLE_FLOWS" != 0 ]; then
		log=$out/$c.idle.$rep.log
		run_client "$c" "$log" "$cb" hold -4 -addr "$tgt:8080" -n "$IDLE_FLOWS" -t 5s
		v=$(sed -n 's/^held=\([0-9]*\).*/\1/p' "$log" | tail -1)
		if [ -n "$v" ]; then record "$c" idle_held "$v"; fi
		if [ -n "$helper_pid" ]; then helper_stats "$c" idle "$helper_pid" "$wall"; fi
	fi
}

# The start-up section: STARTS interleaved samples of `true` started by
# nsgate, pasta, bwrap and bare unshare, in turn within each sample, as
# START_USER (an ordinary user, as an agent runs them; root when that
# user does not exist). Its own summary follows the main table.
START_USER=${BENCH_START_USER:-nsgate-test}
measure_start() { # REP
	local rep=$1 user=root loop=$work/startloop.sh
	id "$START_USER" >/dev/null 2>&1 && user=$START_USER
	cat >"$loop" <<'LOOP'
#!/bin/bash
# startloop.sh N NSGATE NSGATE_ARGS CASES: prints "case µs" per start.
n=$1 nsgate=$2 args=$3 cases=$4 pasta_root=()
[ "$(id -u)" = 0 ] && pasta_root=(--runas 0)
cd /
one() { # CASE CMD...
	local c=$1 a b
	shift
	a=$(date +%s%N)
	"$@" >/dev/null 2>&1 </dev/null || true
	b=$(date +%s%N)
	echo "$c $(((b - a) / 1000))"
}
for _ in $(seq "$n"); do
	[[ " $cases " == *" nsgate "* ]] && one nsgate "$nsgate" run --quiet $args -- true
	[[ " $cases " == *" pasta "* ]] && one pasta pasta "${pasta_root[@]}" -q -4 -f --config-net -- true
	one bwrap bwrap --unshare-all --ro-bind / / --dev /dev --proc /proc -- true
	one unshare unshare --user --map-root-user --net --mount --pid --fork -- true
done
LOOP
	chmod 0755 "$loop"
	local c us
	while read -r c us; do
		record "$c" start_ms "$(awk -v u="$us" 'BEGIN{printf "%.1f", u/1000}')"
	done < <(runuser -u "$user" -- "$loop" "$STARTS" "$NSGATE" "$NSGATE_ARGS" "$CASES")
}

# only SECTION: with BENCH_ONLY set (e.g. BENCH_ONLY=start), run only the
# sections it names.
only() { [ -z "${BENCH_ONLY:-}" ] || [[ " ${BENCH_ONLY//,/ } " == *" $1 "* ]]; }

# measure_latency CASE REP: the kept-alive and the fresh-connection
# latency runs (see the header), one helper each.
measure_latency() {
	local c=$1 rep=$2 tgt log mode p k v
	tgt=$(target_of "$c")
	for mode in $LAT_MODES; do
		log=$out/$c.lat-$mode.$rep.log
		run_client "$c" "$log" "$cb" latency -4 -addr "$tgt:8081" -mode "$mode" -n "$LAT_N"
		if ! grep -q '^mode=' "$log"; then
			say "$c latency $mode: no result (see $log)"
			continue
		fi
		for p in p50 p99 p999; do
			k=${p}_us
			v=$(sed -n "s/^mode=.* $k=\([0-9.]*\).*/\1/p" "$log" | tail -1)
			[ -n "$v" ] && record "$c" "lat_${mode}_${k}" "$v"
		done
	done
}

say "sealed namespace ready; $REPS repetitions of: $CASES (sections: ${ONLY:-all}; iperf3 ${SECS}s, churn ${CHURN_SECS}s, $IDLE_FLOWS idle flows, $LAT_N latency requests)"
for rep in $(seq "$REPS"); do
	if only data; then
		for c in $CASES; do
			say "rep $rep/$REPS: $c"
			measure "$c" "$rep"
		done
		for c in $CASES; do
			[ "$c" = loopback ] && continue
			say "rep $rep/$REPS: $c memory"
			measure_mem "$c" "$rep"
		done
	fi
	if only latency; then
		for c in $CASES; do
			say "rep $rep/$REPS: $c latency"
			measure_latency "$c" "$rep"
		done
	fi
	if only start; then
		say "rep $rep/$REPS: start-up ($STARTS interleaved samples)"
		measure_start "$rep"
	fi
done

# ---------------------------------------------------------------- summary
summarize() {
	awk -F'\t' -v cases="$CASES" '
	function median(list,   n, a, i, j, t) {
		n = split(list, a, " ")
		for (i = 2; i <= n; i++) { t = a[i]; j = i - 1; while (j >= 1 && a[j] + 0 > t + 0) { a[j+1] = a[j]; j-- } a[j+1] = t }
		if (n == 0) return ""
		lo = a[1]; hi = a[n]
		return (n % 2) ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
	}
	{ v[$1 SUBSEP $2] = v[$1 SUBSEP $2] " " $3 }
	END {
		nm = split("up down conn1 conn4 up_rss_mib down_rss_mib conn1_rss_mib conn4_rss_mib churn_rss_mib idle_held idle_held_rss_mib idle_rss_mib up_cpu_pct down_cpu_pct conn1_cpu_pct conn4_cpu_pct conn1_user_us conn1_sys_us conn4_user_us conn4_sys_us start_ms lat_keep_p50_us lat_keep_p99_us lat_keep_p999_us lat_fresh_p50_us lat_fresh_p99_us lat_fresh_p999_us", ms, " ")
		unit["up"] = "Gbit/s"; unit["down"] = "Gbit/s"; unit["conn1"] = "conn/s"; unit["conn4"] = "conn/s"
		# Latencies: lower is better, so a ratio under 1 is nsgate ahead.
		unit["lat_keep_p50_us"] = "µs"; unit["lat_keep_p99_us"] = "µs"; unit["lat_keep_p999_us"] = "µs"
		unit["lat_fresh_p50_us"] = "µs"; unit["lat_fresh_p99_us"] = "µs"; unit["lat_fresh_p999_us"] = "µs"
		nc = split(cases, cs, " ")
		printf "%-18s", "metric"
		for (i = 1; i <= nc; i++) printf "  %-22s", cs[i]
		printf "  %s\n", "nsgate ratios"
		for (k = 1; k <= nm; k++) {
			m = ms[k]; any = 0
			for (i = 1; i <= nc; i++) if ((cs[i] SUBSEP m) in v) any = 1
			if (!any) continue
			label = m; if (m in unit && unit[m] != "µs") label = m " (" unit[m] ")"
			printf "%-18s", label
			for (i = 1; i <= nc; i++) {
				key = cs[i] SUBSEP m
				if (key in v) { med[cs[i]] = median(v[key]); printf "  %-22s", sprintf("%s [%s..%s]", med[cs[i]], lo, hi) }
				else { med[cs[i]] = ""; printf "  %-22s", "-" }
			}
			r = ""
			if (m in unit && med["nsgate"] != "") {
				if (med["loopback"] != "" && med["loopback"] > 0) r = r sprintf("%.2fx loopback ", med["nsgate"] / med["loopback"])
				if (med["proxy"] != "" && med["proxy"] > 0) r = r sprintf("%.2fx proxy ", med["nsgate"] / med["proxy"])
				if (med["slirp4netns"] != "" && med["slirp4netns"] > 0) r = r sprintf("%.2fx slirp4netns ", med["nsgate"] / med["slirp4netns"])
				if (med["pasta"] != "" && med["pasta"] > 0) r = r sprintf("%.2fx pasta", med["nsgate"] / med["pasta"])
			}
			printf "  %s\n", r
		}
	}' "$res"
}

echo
echo "nsgate benchmark: $(uname -r), $(nproc) CPUs, $REPS reps, iperf3 ${SECS}s single stream; median [min..max]"
echo "nsgate: $("$NSGATE" version 2>/dev/null | head -1); slirp4netns $(slirp4netns --version 2>/dev/null | head -1 | awk '{print $3}'); pasta (passt) $(dpkg-query -W -f '${Version}' passt 2>/dev/null || echo '?')"
summarize
# The start-up rows: p50 of all samples, ms, and nsgate's ratio to each.
awk -F'\t' '$2 == "start_ms" { v[$1] = v[$1] " " $3 }
END {
	if (!("nsgate" in v)) exit
	printf "\nstart-up of `true`, ms: p50 [min..max] of all samples\n"
	nc = split("nsgate pasta bwrap unshare", cs, " ")
	for (i = 1; i <= nc; i++) {
		c = cs[i]
		if (!(c in v)) continue
		n = split(v[c], a, " ")
		for (x = 2; x <= n; x++) { t = a[x]; y = x - 1; while (y >= 1 && a[y] + 0 > t + 0) { a[y+1] = a[y]; y-- } a[y+1] = t }
		p50[c] = (n % 2) ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
		printf "  %-8s %6.1f [%s..%s] n=%d", c, p50[c], a[1], a[n], n
		if (c != "nsgate" && p50[c] > 0) printf "  nsgate %.2fx", p50["nsgate"] / p50[c]
		printf "\n"
	}
}' "$res"
if [ -n "${BENCH_OUT:-}" ]; then
	say "raw results in $res"
fi
