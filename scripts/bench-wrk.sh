#!/usr/bin/env bash
# The buy path under wrk (a light load generator) as a ratio to Caddy's respond route receiving
# the very same requests (method, headers, body), for each store: one gateway per store (the
# config of `seckill-bench gateway-config`: captcha off, every other layer on), REPEATS rounds of
# DURATION against the buy path, then against respond with the same buys, alternately. Each round
# buys with fresh users (a slice of SLICE users, paths and tokens prepared before), so every buy is
# an admission unless wrk runs out of them (it says so). docs/BENCHMARKS.md has the figures.
#
#   scripts/bench-wrk.sh                         # stores local, memory and redis, 5 rounds of 3 s
#   STORES="local" FSYNC=always scripts/bench-wrk.sh
#   STORES="redis memory" scripts/bench-wrk.sh
#   BIN=/tmp/build scripts/bench-wrk.sh           # prebuilt caddy and seckill-bench in /tmp/build
#   PERF=/tmp/perf scripts/bench-wrk.sh           # also where the gateway's CPU goes, by perf
#   GATEWAY_ENV=GODEBUG=gctrace=1 KEEP=1 scripts/bench-wrk.sh   # the gateway's GC in its caddy.log
#
# "gw CPU/req" is the gateway process's CPU time (user + system, /proc) over the wrk run divided
# by the requests answered; the last column adds the machine's idle share during each run and its
# context switches per request (/proc/stat), which tell a saturated run from one that waited.
# Store redis runs on a private redis-server started here on REDIS_PORT (no persistence, a
# temporary folder) and stopped after its rounds; its rounds add redis-server's CPU (/proc) per
# win of the buy run ("redis CPU/win"), which the gateway's figures do not hold.
# After its rounds each store gets a summary line: the medians of the ratio, of the p99 ratio and
# of the buy's CPU per request over respond's in the same round, which the machine's speed cancels
# out of (and for redis of redis-server's CPU per win); on a shared machine they move less than a
# single round. With PERF=DIR, perf (Debian package linux-perf) samples the gateway's
# stacks during each run (files kept in DIR), and at the end a table gives, per store, the
# microseconds of gateway CPU per request spent under each part of the handler and the server,
# for the buy path and for respond (scripts/perf-breakdown.py).
set -euo pipefail
GO=${GO:-go}
STORES=${STORES:-local memory redis}
FSYNC=${FSYNC:-}            # store local's fsync; empty for the default (no)
PERF=${PERF:-}              # a folder for perf profiles of the gateway; empty: none
GATEWAY_ENV=${GATEWAY_ENV:-} # NAME=VALUE words added to the gateway's environment, e.g. GODEBUG=gctrace=1
REPEATS=${REPEATS:-5}
DURATION=${DURATION:-3s}
CONNS=${CONNS:-64}
THREADS=${THREADS:-2}
SLICE=${SLICE:-120000}      # users per round: 3 s at 40,000 buys/s
ACTIVITIES=${ACTIVITIES:-10}
PORT=${PORT:-18480}
ADMIN_PORT=${ADMIN_PORT:-18419}
REDIS_PORT=${REDIS_PORT:-18481}

if ! command -v wrk >/dev/null; then
	echo "bench-wrk: wrk is not installed: apt-get install wrk (Debian package)" >&2
	exit 2
fi
if [[ " $STORES " == *" redis "* ]] && { ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; }; then
	echo "bench-wrk: store redis needs redis-server and redis-cli: apt-get install redis-server (Debian package)" >&2
	exit 2
fi
if [ -n "$PERF" ]; then
	if ! command -v perf >/dev/null || ! command -v python3 >/dev/null; then
		echo "bench-wrk: PERF needs perf and python3: apt-get install linux-perf python3" >&2
		exit 2
	fi
	mkdir -p "$PERF"
fi
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/seckill-wrk-XXXXXX)
pid=""
rpid=""
# stop stops the process whose id is in the variable named $1, if any: SIGTERM, then SIGKILL
# after 10 s.
stop() {
	local p=${!1}
	[ -n "$p" ] || return 0
	kill "$p" 2>/dev/null || true
	for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
	kill -9 "$p" 2>/dev/null || true
	wait "$p" 2>/dev/null || true
	printf -v "$1" '%s' ""
}
# run runs a command in the background and waits for it, so that a signal to this script is acted
# on at once (bash runs a trap only once the foreground command has ended) and the command stopped.
child=""
run() {
	"$@" &
	child=$!
	local rc=0
	wait "$child" || rc=$?
	child=""
	return "$rc"
}
# On every exit the gateway and redis-server go; after a failure the work directory (its logs) stays.
cleanup() {
	local rc=$?
	if [ -n "$child" ]; then kill "$child" 2>/dev/null || true; wait "$child" 2>/dev/null || true; fi
	stop pid
	stop rpid
	if [ -n "${KEEP:-}" ]; then echo "bench-wrk: kept $work" >&2; return; fi
	if [ "$rc" -eq 0 ] || ! compgen -G "$work/*/caddy.log" >/dev/null; then
		rm -rf "$work"
	else
		echo "bench-wrk: failed (exit $rc); the gateway logs are kept: $(echo "$work"/*/caddy.log)" >&2
	fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
# A parent-death signal takes the gateway along even when this script is killed with SIGKILL.
pdeath=()
if command -v setpriv >/dev/null; then pdeath=(setpriv --pdeathsig KILL); fi

if [ -n "${BIN:-}" ]; then
	cp "$BIN/caddy" "$BIN/seckill-bench" "$work/"
else
	(cd "$here" && $GO build -o "$work/caddy" ./cmd/caddy && $GO build -o "$work/seckill-bench" ./cmd/seckill-bench)
fi
# Caddy listens with SO_REUSEPORT: on a port a gateway left running (or anything else) holds, a
# new one starts too and the kernel splits the connections between the two, whose hashed-URL salts
# and stores differ (404s, 401s, sold-outs that are not). Such a port is refused, before each start.
# A seckill-bench from $BIN older than its check-port command: one from this checkout checks.
checker="$work/seckill-bench"
if ! "$checker" check-port 127.0.0.1:1 >/dev/null 2>&1; then
	checker="$work/check-port"
	(cd "$here" && $GO build -o "$checker" ./cmd/seckill-bench)
fi
check_ports() {
	if ! "$checker" check-port "127.0.0.1:$PORT" "127.0.0.1:$ADMIN_PORT"; then
		echo "bench-wrk: refusing to start a gateway on 127.0.0.1:$PORT (admin 127.0.0.1:$ADMIN_PORT): stop what answers there or set PORT and ADMIN_PORT" >&2
		exit 3
	fi
}
check_ports
secret=$(head -c 48 /dev/urandom | od -An -tx1 | tr -d ' \n' | head -c 48)
stock=$(( SLICE * REPEATS / ACTIVITIES + 1 ))
base="http://127.0.0.1:$PORT"
echo "# wrk -t$THREADS -c$CONNS -d$DURATION, $REPEATS rounds, $SLICE fresh users per round, $ACTIVITIES activities x $stock items; load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "store | round | seckill req/s | respond req/s | ratio | seckill p99 | respond p99 | p99 ratio | gw CPU/req seckill | respond | redis CPU/win | seckill statuses"
# median prints the median of the numbers on stdin, then their least and greatest.
median() { sort -n | awk '{ v[NR] = $1 } END { printf "%.2f, %.2f–%.2f", (v[int((NR + 1) / 2)] + v[int(NR / 2) + 1]) / 2, v[1], v[NR] }'; }
# cpu_ticks prints the CPU time (user + system, in clock ticks) process $1 has used.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
secs=${DURATION%s}
# commits prints store local's commits, the changes they held, its checkpoints and their seconds so
# far, from the admin endpoint's metrics ("- - - -" when there are none: another store).
commits() {
	curl -fs "http://127.0.0.1:$ADMIN_PORT/metrics" 2>/dev/null | awk '
		/^caddy_seckill_local_commits_total / { c = $2 } /^caddy_seckill_local_committed_changes_total / { n = $2 }
		/^caddy_seckill_local_checkpoints_total / { k = $2 } /^caddy_seckill_local_checkpoint_seconds_total / { ks = $2 }
		END { if (c == "") print "- - - -"; else print c, n, k + 0, ks + 0 }'
}
# machine prints the whole machine's idle and iowait ticks, all its ticks, and its context switches
# so far (/proc/stat): whether a run left the cores idle, and how often the kernel switched tasks.
machine() { awk '/^cpu / { i = $5 + $6; t = 0; for (k = 2; k <= NF; k++) t += $k } /^ctxt / { c = $2 } END { print i, t, c }' /proc/stat; }
# measure runs wrk on path prefix $2 into $1 (name.txt), and writes the gateway's CPU µs per answered
# request to name.cpu, the machine's idle share and context switches per request to name.mach, and
# with store redis redis-server's CPU µs per win (a 2xx answer) to name.rcpu; with PERF, perf samples the
# gateway meanwhile (name.perf in $PERF).
measure() {
	local name=$1 prefix=$2 t0 t1 n m0 m1 r0=0 r1=0 wins
	t0=$(cpu_ticks "$pid")
	[ -n "$rpid" ] && r0=$(cpu_ticks "$rpid")
	m0=$(machine)
	"${pdeath[@]}" wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -s "$here/scripts/wrk-buy.lua" "$base" -- "$dir/buys-$r.tsv" "$prefix" "$THREADS" > "$dir/$name.txt" &
	child=$!
	if [ -n "$PERF" ]; then
		perf record -q -e cpu-clock -F 999 -g -p "$pid" -o "$PERF/$store-$name.perf" -- sleep "$(( ${secs%.*} > 1 ? ${secs%.*} - 1 : 1 ))" 2>/dev/null || true
	fi
	wait "$child"
	child=""
	t1=$(cpu_ticks "$pid")
	[ -n "$rpid" ] && r1=$(cpu_ticks "$rpid")
	m1=$(machine)
	n=$(awk '/requests in/ {print $1}' "$dir/$name.txt")
	wins=$(sed -n 's/^statuses //p' "$dir/$name.txt" | tr ' ;' '\n\n' | awk -F: '$1 ~ /^2/ { n += $2 } END { print n + 0 }')
	awk -v r=$(( r1 - r0 )) -v hz="$hz" -v w="${wins:-0}" -v on="$rpid" 'BEGIN { if (on == "" || w == 0) print "-"; else printf "%.1f\n", r * 1e6 / hz / w }' > "$dir/$name.rcpu"
	awk -v t=$(( t1 - t0 )) -v hz="$hz" -v n="$n" 'BEGIN { printf "%.1f", t * 1e6 / hz / n }' > "$dir/$name.cpu"
	echo "$m0 $m1" | awk -v n="$n" '{ printf "idle %.0f %%, %.2f context switches/req", 100 * ($4 - $1) / ($5 - $2), ($6 - $3) / n }' > "$dir/$name.mach"
	if [ -n "$PERF" ]; then cp "$dir/$name.txt" "$PERF/$store-$name.txt"; cp "$dir/$name.cpu" "$PERF/$store-$name.cpu"; fi
}
for store in $STORES; do
	dir="$work/$store"
	mkdir -p "$dir"
	flags=()
	if [ "$store" = local ] && [ -n "$FSYNC" ]; then flags=(-local-fsync "$FSYNC"); fi
	if [ "$store" = redis ]; then
		if ! "$checker" check-port "127.0.0.1:$REDIS_PORT"; then
			echo "bench-wrk: refusing to start redis-server on 127.0.0.1:$REDIS_PORT: stop what answers there or set REDIS_PORT" >&2
			exit 3
		fi
		mkdir -p "$dir/redis"
		"${pdeath[@]}" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir/redis" > "$dir/redis.log" 2>&1 &
		rpid=$!
		for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
		if ! redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1; then
			echo "bench-wrk: redis-server did not start; the end of $dir/redis.log:" >&2
			tail -n 20 "$dir/redis.log" >&2
			exit 3
		fi
		flags=(-redis-addr "127.0.0.1:$REDIS_PORT")
	fi
	"$work/seckill-bench" gateway-config -store "$store" "${flags[@]}" -listen "127.0.0.1:$PORT" -admin-listen "127.0.0.1:$ADMIN_PORT" \
		-jwt-secret "$secret" -activities "$ACTIVITIES" -stock "$stock" > "$dir/Caddyfile"
	check_ports
	# shellcheck disable=SC2086 # GATEWAY_ENV is split into its words on purpose
	(cd "$dir" && exec "${pdeath[@]}" env $GATEWAY_ENV "$work/caddy" run --config Caddyfile --adapter caddyfile > caddy.log 2>&1) &
	pid=$!
	# Ready when every activity answers: Caddy starts its apps in no fixed order, so the server may
	# answer while the activities are still being defined (a 404 for the later ones meanwhile).
	ready() {
		local i
		for i in $(seq 0 $(( ACTIVITIES - 1 ))); do curl -fs "$base/seckill/bench-$i" >/dev/null 2>&1 || return 1; done
	}
	for _ in $(seq 100); do
		kill -0 "$pid" 2>/dev/null || break
		ready && break
		sleep 0.2
	done
	if ! kill -0 "$pid" 2>/dev/null || ! ready; then
		echo "bench-wrk: the gateway did not start; the end of $dir/caddy.log:" >&2
		tail -n 20 "$dir/caddy.log" >&2
		exit 3
	fi
	if ! "$checker" check-port -pid "$pid" "127.0.0.1:$PORT" "127.0.0.1:$ADMIN_PORT"; then
		echo "bench-wrk: another process took the gateway's port meanwhile; the end of $dir/caddy.log:" >&2
		tail -n 20 "$dir/caddy.log" >&2
		exit 3
	fi
	for r in $(seq "$REPEATS"); do
		run "$work/seckill-bench" wrk-requests -target "$base" -jwt-secret "$secret" -activities "$ACTIVITIES" \
			-first $(( (r - 1) * SLICE )) -users "$SLICE" -out "$dir/buys-$r.tsv"
	done
	for r in $(seq "$REPEATS"); do
		read -r c0 n0 k0 ks0 < <(commits)
		measure "seckill-$r" ""
		read -r c1 n1 k1 ks1 < <(commits)
		measure "respond-$r" /baseline
		s_rps=$(awk '/^Requests\/sec/ {print $2}' "$dir/seckill-$r.txt")
		r_rps=$(awk '/^Requests\/sec/ {print $2}' "$dir/respond-$r.txt")
		s_p99=$(awk '/^p50_us/ {print $4}' "$dir/seckill-$r.txt")
		r_p99=$(awk '/^p50_us/ {print $4}' "$dir/respond-$r.txt")
		statuses="$(sed -n 's/^statuses //p' "$dir/seckill-$r.txt"); machine: $(cat "$dir/seckill-$r.mach") (respond: $(cat "$dir/respond-$r.mach"))"
		if [ "$c0" != - ] && [ "$c1" != - ]; then
			statuses="$statuses; changes per commit: $(awk -v c0="$c0" -v c1="$c1" -v n0="$n0" -v n1="$n1" 'BEGIN { c = c1 - c0; printf "%.1f", c ? (n1 - n0) / c : 0 }')"
			statuses="$statuses; checkpoints: $(awk -v k0="$k0" -v k1="$k1" -v s0="$ks0" -v s1="$ks1" 'BEGIN { k = k1 - k0; printf "%d, %.2f ms each", k, k ? (s1 - s0) * 1000 / k : 0 }')"
		fi
		rcpu=$(cat "$dir/seckill-$r.rcpu")
		awk -v st="$store" -v r="$r" -v s="$s_rps" -v b="$r_rps" -v sp="$s_p99" -v bp="$r_p99" -v c="$statuses" \
			-v sc="$(cat "$dir/seckill-$r.cpu")" -v rc="$(cat "$dir/respond-$r.cpu")" -v rd="$rcpu" 'BEGIN {
			printf "%s | %d | %.0f | %.0f | %.2f | %.2f ms | %.2f ms | %.2f | %.1f µs | %.1f µs | %s | %s\n", st, r, s, b, s / b, sp / 1000, bp / 1000, sp / bp, sc, rc, (rd == "-" ? "-" : rd " µs"), c }'
		echo "$s_rps $r_rps $(cat "$dir/seckill-$r.cpu") $(cat "$dir/respond-$r.cpu") $s_p99 $r_p99 $rcpu" >> "$dir/rounds"
	done
	stop pid
	stop rpid
	# The medians over the rounds, which a busy neighbour moves less than the range: the ratio,
	# the p99 ratio, and the gateway's CPU per buy over its CPU per respond of the same round (the
	# machine's speed cancels out of it); for redis, redis-server's CPU per win.
	summary="# $store: ratio median $(awk '{ print $1 / $2 }' "$dir/rounds" | median) over $REPEATS rounds;"
	summary="$summary p99 ratio median $(awk '{ print $5 / $6 }' "$dir/rounds" | median);"
	summary="$summary buy CPU ÷ respond CPU median $(awk '{ print $3 / $4 }' "$dir/rounds" | median)"
	if [ "$store" = redis ]; then
		summary="$summary; redis CPU/win median $(awk '$7 != "-" { print $7 }' "$dir/rounds" | median) µs"
	fi
	echo "$summary"
done
echo "# load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -n "$PERF" ]; then
	python3 "$here/scripts/perf-breakdown.py" "$PERF" $STORES
fi
