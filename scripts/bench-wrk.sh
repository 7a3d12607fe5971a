#!/usr/bin/env bash
# The buy path under wrk (a light load generator) as a ratio to Caddy's respond route receiving
# the very same requests (method, headers, body), for each store: one gateway per store (the
# config of `seckill-bench gateway-config`: captcha off, every other layer on), REPEATS rounds of
# DURATION against the buy path, then against respond with the same buys, alternately. Each round
# buys with fresh users (a slice of SLICE users, paths and tokens prepared before), so every buy is
# an admission unless wrk runs out of them (it says so). Then the sold-out refusal: a second gateway
# of the store whose activities hold one item each, prepared fresh users' presses (SOLDOUT_SLICE a
# round), one buy per activity that sells it out, and REPEATS rounds of those presses (token,
# hashed path, Idempotency-Key: every layer up to the node's sold-out flag) against the buy path
# and respond, alternately. SOLDOUT=0 skips it. docs/BENCHMARKS.md has the figures.
#
#   scripts/bench-wrk.sh                         # stores local, memory and redis, 5 rounds of 3 s
#   STORES="local" FSYNC=always scripts/bench-wrk.sh
#   STORES="redis memory" scripts/bench-wrk.sh
#   SOLDOUT=0 scripts/bench-wrk.sh                # the buy rounds only
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
# A sold-out round is flagged ("NOT SOLD-OUT") when wrk saw another status than 410 or the node's
# sold-out flag answered fewer presses than wrk counted 410s (then the store answered).
# After its rounds each store gets a summary line: the medians of the ratio, of the p99 ratio and
# of the buy's CPU per request over respond's in the same round, which the machine's speed cancels
# out of (and for redis of redis-server's CPU per win), then the same three for the sold-out
# rounds; on a shared machine they move less than a single round. With PERF=DIR, perf (Debian
# package linux-perf) samples the gateway's stacks during each run (files kept in DIR), and at the
# end a table gives, per store, the microseconds of gateway CPU per request spent under each part
# of the handler and the server, for the buy path and for respond (scripts/perf-breakdown.py).
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
SLICE=${SLICE:-240000}      # users per round: 3 s at 80,000 buys/s (a quiet machine reaches 64,000)
SOLDOUT=${SOLDOUT:-1}       # 0: no sold-out rounds
SOLDOUT_SLICE=${SOLDOUT_SLICE:-240000} # users per sold-out round: 3 s at 80,000 presses/s
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
# shellcheck source=scripts/lib-bench.sh
. "$here/scripts/lib-bench.sh"
me=bench-wrk
bench_setup seckill-wrk
stock=$(( SLICE * REPEATS / ACTIVITIES + 1 ))
echo "# wrk -t$THREADS -c$CONNS -d$DURATION, $REPEATS rounds, $SLICE fresh users per round, $ACTIVITIES activities x $stock items; load: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "$SOLDOUT" != 0 ]; then
	echo "# then per store $REPEATS sold-out rounds of $SOLDOUT_SLICE fresh users' presses, $ACTIVITIES activities x 1 item, sold out first"
fi
echo "store | round | seckill req/s | respond req/s | ratio | seckill p99 | respond p99 | p99 ratio | gw CPU/req seckill | respond | redis CPU/win | seckill statuses"
secs=${DURATION%s}
# metric prints the value of the gateway's metric series $1 (a line's first word, e.g.
# caddy_seckill_rejected_total{layer="sold_out_flag"}) from the admin endpoint, 0 when it has none.
metric() {
	curl -fs "http://127.0.0.1:$ADMIN_PORT/metrics" 2>/dev/null | awk -v s="$1" '$1 == s { v = $2 } END { printf "%d\n", v }'
}
# commits prints store local's commits, the changes they held, its checkpoints and their seconds so
# far, from the admin endpoint's metrics ("- - - -" when there are none: another store).
commits() {
	curl -fs "http://127.0.0.1:$ADMIN_PORT/metrics" 2>/dev/null | awk '
		/^caddy_seckill_local_commits_total / { c = $2 } /^caddy_seckill_local_committed_changes_total / { n = $2 }
		/^caddy_seckill_local_checkpoints_total / { k = $2 } /^caddy_seckill_local_checkpoint_seconds_total / { ks = $2 }
		END { if (c == "") print "- - - -"; else print c, n, k + 0, ks + 0 }'
}
# measure runs wrk with the requests of file $3 on path prefix $2 into $1 (name.txt), and writes the
# gateway's CPU µs per answered request to name.cpu, the machine's idle share and context switches
# per request to name.mach, and with store redis redis-server's CPU µs per win (a 2xx answer) to
# name.rcpu; with PERF, perf samples the gateway meanwhile (name.perf in $PERF).
measure() {
	local name=$1 prefix=$2 file=$3 t0 t1 n m0 m1 r0=0 r1=0 wins
	t0=$(cpu_ticks "$pid")
	[ -n "$rpid" ] && r0=$(cpu_ticks "$rpid")
	m0=$(machine)
	"${pdeath[@]}" wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -s "$here/scripts/wrk-buy.lua" "$base" -- "$file" "$prefix" "$THREADS" > "$dir/$name.txt" &
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
	machine_share "$m0" "$m1" "$n" > "$dir/$name.mach"
	if [ -n "$PERF" ]; then cp "$dir/$name.txt" "$PERF/$store-$name.txt"; cp "$dir/$name.cpu" "$PERF/$store-$name.cpu"; fi
}
# config writes $dir/Caddyfile: the store's gateway with $1 items per activity.
config() {
	"$work/seckill-bench" gateway-config -store "$store" "${flags[@]}" -listen "127.0.0.1:$PORT" -admin-listen "127.0.0.1:$ADMIN_PORT" \
		-jwt-secret "$secret" -activities "$ACTIVITIES" -stock "$1" > "$dir/Caddyfile"
}
# prepare writes $dir/$1: the requests of users $2..$2+$3-1 (seckill-bench wrk-requests).
prepare() {
	run "$work/seckill-bench" wrk-requests -target "$base" -jwt-secret "$secret" -activities "$ACTIVITIES" \
		-first "$2" -users "$3" -out "$dir/$1"
}
# soldout runs the store's sold-out rounds in $dir/soldout, on a gateway of its own whose
# activities hold one item each: the presses' users get their paths first (the path call refuses
# once the activity is sold out), then users 0..ACTIVITIES-1 buy one item each (a 202 each, which
# sets the node's flag), then the rounds.
soldout() {
	dir="$dir/soldout"
	mkdir -p "$dir"
	if [ -n "$rpid" ]; then flush_redis "$REDIS_PORT" "$rpid"; fi
	config 1
	start_gateway
	prepare sellers.tsv 0 "$ACTIVITIES"
	for r in $(seq "$REPEATS"); do
		prepare "buys-$r.tsv" $(( ACTIVITIES + (r - 1) * SOLDOUT_SLICE )) "$SOLDOUT_SLICE"
	done
	local path auth xff key code f0 f1 n410 notes
	while IFS=$'\t' read -r path auth xff key; do
		code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$base$path" -H "Authorization: $auth" -H "X-Forwarded-For: $xff" -H "Idempotency-Key: $key")
		if [ "$code" != 202 ]; then
			echo "bench-wrk: the sell-out buy of $path answered $code, not 202" >&2
			exit 3
		fi
	done < "$dir/sellers.tsv"
	for r in $(seq "$REPEATS"); do
		f0=$(metric 'caddy_seckill_rejected_total{layer="sold_out_flag"}')
		PERF='' measure "soldout-$r" "" "$dir/buys-$r.tsv" # perf-breakdown tabulates the buys only
		f1=$(metric 'caddy_seckill_rejected_total{layer="sold_out_flag"}')
		PERF='' measure "soldout-respond-$r" /baseline "$dir/buys-$r.tsv"
		n410=$(sed -n 's/^statuses //p' "$dir/soldout-$r.txt" | tr ' ;' '\n\n' | awk -F: '$1 == 410 { n += $2 } END { print n + 0 }')
		notes="; sold-out flag answered $(( f1 - f0 ))"
		if ! sed -n 's/^statuses //p' "$dir/soldout-$r.txt" | grep -qE '^410:[0-9]+;' || [ $(( f1 - f0 )) -lt "$n410" ]; then
			notes="$notes; NOT SOLD-OUT"
		fi
		row "soldout-$r" "soldout-respond-$r" "$r" "$store sold-out" "$notes"
	done
	stop pid
	dir=${dir%/soldout}
}
for store in $STORES; do
	dir="$work/$store"
	mkdir -p "$dir"
	flags=()
	if [ "$store" = local ] && [ -n "$FSYNC" ]; then flags=(-local-fsync "$FSYNC"); fi
	if [ "$store" = redis ]; then
		start_redis rpid "$REDIS_PORT"
		flags=(-redis-addr "127.0.0.1:$REDIS_PORT")
	fi
	config "$stock"
	start_gateway
	for r in $(seq "$REPEATS"); do
		prepare "buys-$r.tsv" $(( (r - 1) * SLICE )) "$SLICE"
	done
	for r in $(seq "$REPEATS"); do
		read -r c0 n0 k0 ks0 < <(commits)
		measure "seckill-$r" "" "$dir/buys-$r.tsv"
		read -r c1 n1 k1 ks1 < <(commits)
		measure "respond-$r" /baseline "$dir/buys-$r.tsv"
		notes=""
		if [ "$c0" != - ] && [ "$c1" != - ]; then
			notes="; changes per commit: $(awk -v c0="$c0" -v c1="$c1" -v n0="$n0" -v n1="$n1" 'BEGIN { c = c1 - c0; printf "%.1f", c ? (n1 - n0) / c : 0 }')"
			notes="$notes; checkpoints: $(awk -v k0="$k0" -v k1="$k1" -v s0="$ks0" -v s1="$ks1" 'BEGIN { k = k1 - k0; printf "%d, %.2f ms each", k, k ? (s1 - s0) * 1000 / k : 0 }')"
		fi
		row "seckill-$r" "respond-$r" "$r" "$store" "$notes"
	done
	stop pid
	summary="# $store: $(medians "$dir" buy)"
	if [ "$store" = redis ]; then
		summary="$summary; redis CPU/win median $(awk '$7 != "-" { print $7 }' "$dir/rounds" | median) µs"
	fi
	if [ "$SOLDOUT" != 0 ]; then
		soldout
		summary="$summary; sold out: $(medians "$dir/soldout" press)"
	fi
	stop rpid
	echo "$summary"
done
echo "# load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -n "$PERF" ]; then
	python3 "$here/scripts/perf-breakdown.py" "$PERF" $STORES
fi
