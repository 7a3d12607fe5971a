#!/usr/bin/env bash
# A waiting buyer's poll of the waiting room (GET /seckill/<a>/queue) under wrk, as a ratio to
# Caddy's respond route receiving the very same requests, for each store: the gateway of
# `seckill-bench gateway-config` (captcha off, every other layer on) with a waiting room in every
# activity (admit 1/h: one buyer let through, everyone else waiting), USERS buyers who joined the
# line first, then REPEATS rounds of DURATION of their polls against the gateway, then against
# respond with the same polls, alternately. docs/BENCHMARKS.md has the figures.
#
#   scripts/bench-wrk-queue.sh                    # store memory and store redis, 3 rounds of 3 s
#   STORES=redis scripts/bench-wrk-queue.sh
#   BIN=/tmp/build scripts/bench-wrk-queue.sh     # prebuilt caddy and seckill-bench in /tmp/build
#
# Store redis runs on a private redis-server started here (no persistence, a temporary folder),
# on REDIS_PORT. "gw CPU/req" is the gateway process's CPU time (user + system, /proc) over the
# wrk run divided by the requests answered (redis-server's own CPU is not in it: "redis CPU/req").
# Rows and summaries are bench-wrk.sh's (scripts/lib-bench.sh): the p99 ratio, and after the
# statuses the machine's idle share and context switches per request.
# USERS must be polled at most a few times a second each, under the user rate limit of the
# generated config (10/s burst 5): 6,000 users at up to 30,000 polls/s.
set -euo pipefail
GO=${GO:-go}
STORES=${STORES:-memory redis}
REPEATS=${REPEATS:-3}
DURATION=${DURATION:-3s}
CONNS=${CONNS:-64}
THREADS=${THREADS:-2}
USERS=${USERS:-6000}
ACTIVITIES=${ACTIVITIES:-10}
PORT=${PORT:-18580}
ADMIN_PORT=${ADMIN_PORT:-18519}
REDIS_PORT=${REDIS_PORT:-18679}

for tool in wrk curl; do
	if ! command -v "$tool" >/dev/null; then
		echo "bench-wrk-queue: $tool is not installed (Debian package $tool)" >&2
		exit 2
	fi
done
here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/lib-bench.sh
. "$here/scripts/lib-bench.sh"
me=bench-wrk-queue
bench_setup seckill-wrkq

# measure runs wrk's polls (or joins, $3) on prefix $2 into $dir/$1.txt, and writes the files row
# reads: the gateway's CPU µs per answered request ($1.cpu), redis-server's ($1.rcpu, "-" without
# it), the machine's idle share and context switches per request ($1.mach).
measure() {
	local name=$1 prefix=$2 method=${3:-GET} t0 t1 r0=0 r1=0 m0 m1 n
	t0=$(cpu_ticks "$pid")
	[ -n "$rpid" ] && r0=$(cpu_ticks "$rpid")
	m0=$(machine)
	"${pdeath[@]}" wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -s "$here/scripts/wrk-queue.lua" "$base" -- \
		"$dir/users.tsv" "$prefix" "$THREADS" "$method" > "$dir/$name.txt"
	t1=$(cpu_ticks "$pid")
	[ -n "$rpid" ] && r1=$(cpu_ticks "$rpid")
	m1=$(machine)
	n=$(awk '/requests in/ {print $1}' "$dir/$name.txt")
	awk -v t=$(( t1 - t0 )) -v hz="$hz" -v n="$n" 'BEGIN { printf "%.1f", t * 1e6 / hz / n }' > "$dir/$name.cpu"
	awk -v r=$(( r1 - r0 )) -v hz="$hz" -v n="$n" -v on="$rpid" 'BEGIN { if (on == "") print "-"; else printf "%.1f\n", r * 1e6 / hz / n }' > "$dir/$name.rcpu"
	machine_share "$m0" "$m1" "$n" > "$dir/$name.mach"
}

echo "# wrk -t$THREADS -c$CONNS -d$DURATION, $REPEATS rounds, $USERS users in the lines of $ACTIVITIES activities (admit 1/h); load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "store | round | poll req/s | respond req/s | ratio | poll p99 | respond p99 | p99 ratio | gw CPU/req poll | respond | redis CPU/req | poll statuses"
for store in $STORES; do
	dir="$work/$store"
	mkdir -p "$dir"
	redis=()
	if [ "$store" = redis ]; then
		start_redis rpid "$REDIS_PORT"
		redis=(-redis-addr "127.0.0.1:$REDIS_PORT")
	fi
	"$work/seckill-bench" gateway-config -store "$store" "${redis[@]}" -listen "127.0.0.1:$PORT" -admin-listen "127.0.0.1:$ADMIN_PORT" \
		-jwt-secret "$secret" -activities "$ACTIVITIES" -stock 1000 > "$dir/plain.Caddyfile"
	# The users' tokens and addresses: wrk-requests asks a gateway without a room for their buy
	# paths (the path names the activity).
	cp "$dir/plain.Caddyfile" "$dir/Caddyfile"
	start_gateway
	"$work/seckill-bench" wrk-requests -target "$base" -jwt-secret "$secret" -activities "$ACTIVITIES" \
		-first 0 -users "$USERS" -out "$dir/users.tsv"
	stop pid
	# The same sale with a waiting room in every activity; every user joins its line.
	awk '{ print } /^\t\t\tpay_within / { print "\t\t\twaiting_room {\n\t\t\t\tadmit 1/h\n\t\t\t\tsession 24h\n\t\t\t}" }' \
		"$dir/plain.Caddyfile" > "$dir/Caddyfile"
	if [ -n "$rpid" ]; then flush_redis "$REDIS_PORT" "$rpid"; fi
	start_gateway
	# Joins are idempotent: wrk goes over the users until every one has joined (a round over
	# them all with only 200s), at most 10 times 2 s.
	for j in $(seq 10); do
		DURATION=2s measure "join-$j" "" POST
		if grep -q "statuses.*[^0-9]\(4[0-9][0-9]\|5[0-9][0-9]\):" "$dir/join-$j.txt"; then
			echo "bench-wrk-queue: joins refused: $(sed -n 's/^statuses //p' "$dir/join-$j.txt")" >&2
			exit 3
		fi
		joined=$(awk -v j="$j" '/^statuses/ { split($2, a, ":"); n += a[2] } END { print n }' "$dir"/join-*.txt)
		[ "$joined" -ge "$USERS" ] && break
	done
	if [ "$joined" -lt "$USERS" ]; then
		echo "bench-wrk-queue: only $joined joins for $USERS users" >&2
		exit 3
	fi
	for r in $(seq "$REPEATS"); do
		measure "poll-$r" ""
		measure "respond-$r" /baseline
		row "poll-$r" "respond-$r" "$r" "$store" ""
	done
	stop pid
	stop rpid
	echo "# $store: $(medians "$dir" poll)"
done
echo "# load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
