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
work=$(mktemp -d /tmp/seckill-wrkq-XXXXXX)
pid=""
rpid=""
cleanup() {
	local rc=$?
	stop pid
	stop rpid
	if [ "$rc" -eq 0 ]; then
		rm -rf "$work"
	else
		echo "bench-wrk-queue: failed (exit $rc); logs kept in $work" >&2
	fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
pdeath=()
if command -v setpriv >/dev/null; then pdeath=(setpriv --pdeathsig KILL); fi

if [ -n "${BIN:-}" ]; then
	cp "$BIN/caddy" "$BIN/seckill-bench" "$work/"
else
	(cd "$here" && $GO build -o "$work/caddy" ./cmd/caddy && $GO build -o "$work/seckill-bench" ./cmd/seckill-bench)
fi
pick_checker
secret=$(head -c 48 /dev/urandom | od -An -tx1 | tr -d ' \n' | head -c 48)
base="http://127.0.0.1:$PORT"
hz=$(getconf CLK_TCK)

# measure runs wrk's polls (or joins, $3) on prefix $2 into $dir/$1.txt, the gateway's and
# redis-server's CPU µs per answered request into $1.cpu.
measure() {
	local name=$1 prefix=$2 method=${3:-GET} t0 t1 r0=0 r1=0 n
	t0=$(cpu_ticks "$pid")
	[ -n "$rpid" ] && r0=$(cpu_ticks "$rpid")
	"${pdeath[@]}" wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -s "$here/scripts/wrk-queue.lua" "$base" -- \
		"$dir/users.tsv" "$prefix" "$THREADS" "$method" > "$dir/$name.txt"
	t1=$(cpu_ticks "$pid")
	[ -n "$rpid" ] && r1=$(cpu_ticks "$rpid")
	n=$(awk '/requests in/ {print $1}' "$dir/$name.txt")
	awk -v t=$(( t1 - t0 )) -v r=$(( r1 - r0 )) -v hz="$hz" -v n="$n" 'BEGIN { printf "%.1f %.1f\n", t * 1e6 / hz / n, r * 1e6 / hz / n }' > "$dir/$name.cpu"
}

echo "# wrk -t$THREADS -c$CONNS -d$DURATION, $REPEATS rounds, $USERS users in the lines of $ACTIVITIES activities (admit 1/h); load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "store | round | poll req/s | respond req/s | ratio | poll p99 | respond p99 | gw CPU/req poll | respond | redis CPU/req | poll statuses"
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
		read -r s_cpu s_rcpu < "$dir/poll-$r.cpu"
		read -r r_cpu _ < "$dir/respond-$r.cpu"
		awk -v st="$store" -v r="$r" \
			-v s="$(awk '/^Requests\/sec/ {print $2}' "$dir/poll-$r.txt")" -v b="$(awk '/^Requests\/sec/ {print $2}' "$dir/respond-$r.txt")" \
			-v sp="$(awk '/^p50_us/ {print $4}' "$dir/poll-$r.txt")" -v bp="$(awk '/^p50_us/ {print $4}' "$dir/respond-$r.txt")" \
			-v sc="$s_cpu" -v rc="$r_cpu" -v rd="$s_rcpu" -v st2="$(sed -n 's/^statuses //p' "$dir/poll-$r.txt")" 'BEGIN {
			printf "%s | %d | %.0f | %.0f | %.2f | %.2f ms | %.2f ms | %.1f µs | %.1f µs | %s | %s\n", st, r, s, b, s / b, sp / 1000, bp / 1000, sc, rc, (rd > 0 ? sprintf("%.1f µs", rd) : "-"), st2 }'
		echo "$(awk '/^Requests\/sec/ {print $2}' "$dir/poll-$r.txt") $(awk '/^Requests\/sec/ {print $2}' "$dir/respond-$r.txt") $s_cpu $r_cpu" >> "$dir/rounds"
	done
	stop pid
	stop rpid
	echo "# $store: ratio median $(awk '{ print $1 / $2 }' "$dir/rounds" | median) over $REPEATS rounds;" \
		"poll CPU ÷ respond CPU median $(awk '{ print $3 / $4 }' "$dir/rounds" | median)"
done
echo "# load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
