#!/usr/bin/env bash
# The buy path under wrk (a light load generator) as a ratio to Caddy's respond route receiving
# the very same requests (method, headers, body), for each store: one gateway per store (the
# config of `seckill-bench gateway-config`: captcha off, every other layer on), REPEATS rounds of
# DURATION against the buy path, then against respond with the same buys, alternately. Each round
# buys with fresh users (a slice of SLICE users, paths and tokens prepared before), so every buy is
# an admission unless wrk runs out of them (it says so). docs/BENCHMARKS.md has the figures.
#
#   scripts/bench-wrk.sh                         # store local and store memory, 3 rounds of 3 s
#   STORES="local" FSYNC=always scripts/bench-wrk.sh
#   BIN=/tmp/build scripts/bench-wrk.sh           # prebuilt caddy and seckill-bench in /tmp/build
set -euo pipefail
GO=${GO:-go}
STORES=${STORES:-local memory}
FSYNC=${FSYNC:-}            # store local's fsync; empty for the default (no)
REPEATS=${REPEATS:-3}
DURATION=${DURATION:-3s}
CONNS=${CONNS:-64}
THREADS=${THREADS:-2}
SLICE=${SLICE:-120000}      # users per round: 3 s at 40,000 buys/s
ACTIVITIES=${ACTIVITIES:-10}
PORT=${PORT:-18480}
ADMIN_PORT=${ADMIN_PORT:-18419}

if ! command -v wrk >/dev/null; then
	echo "bench-wrk: wrk is not installed: apt-get install wrk (Debian package)" >&2
	exit 2
fi
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/seckill-wrk-XXXXXX)
pid=""
cleanup() {
	if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

if [ -n "${BIN:-}" ]; then
	cp "$BIN/caddy" "$BIN/seckill-bench" "$work/"
else
	(cd "$here" && $GO build -o "$work/caddy" ./cmd/caddy && $GO build -o "$work/seckill-bench" ./cmd/seckill-bench)
fi
secret=$(head -c 48 /dev/urandom | od -An -tx1 | tr -d ' \n' | head -c 48)
stock=$(( SLICE * REPEATS / ACTIVITIES + 1 ))
base="http://127.0.0.1:$PORT"
echo "# wrk -t$THREADS -c$CONNS -d$DURATION, $REPEATS rounds, $SLICE fresh users per round, $ACTIVITIES activities x $stock items; load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "store | round | seckill req/s | respond req/s | ratio | seckill p99 | respond p99 | p99 ratio | seckill statuses"
for store in $STORES; do
	dir="$work/$store"
	mkdir -p "$dir"
	fsync=()
	if [ "$store" = local ] && [ -n "$FSYNC" ]; then fsync=(-local-fsync "$FSYNC"); fi
	"$work/seckill-bench" gateway-config -store "$store" "${fsync[@]}" -listen "127.0.0.1:$PORT" -admin-listen "127.0.0.1:$ADMIN_PORT" \
		-jwt-secret "$secret" -activities "$ACTIVITIES" -stock "$stock" > "$dir/Caddyfile"
	(cd "$dir" && exec "$work/caddy" run --config Caddyfile --adapter caddyfile > caddy.log 2>&1) &
	pid=$!
	for _ in $(seq 100); do
		curl -fs "$base/seckill/bench-0" >/dev/null 2>&1 && break
		sleep 0.2
	done
	curl -fs "$base/seckill/bench-0" >/dev/null || { echo "bench-wrk: the gateway did not start:" >&2; tail "$dir/caddy.log" >&2; exit 3; }
	for r in $(seq "$REPEATS"); do
		"$work/seckill-bench" wrk-requests -target "$base" -jwt-secret "$secret" -activities "$ACTIVITIES" \
			-first $(( (r - 1) * SLICE )) -users "$SLICE" -out "$dir/buys-$r.tsv"
	done
	for r in $(seq "$REPEATS"); do
		wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -s "$here/scripts/wrk-buy.lua" "$base" -- "$dir/buys-$r.tsv" "" "$THREADS" > "$dir/seckill-$r.txt"
		wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -s "$here/scripts/wrk-buy.lua" "$base" -- "$dir/buys-$r.tsv" /baseline "$THREADS" > "$dir/respond-$r.txt"
		s_rps=$(awk '/^Requests\/sec/ {print $2}' "$dir/seckill-$r.txt")
		r_rps=$(awk '/^Requests\/sec/ {print $2}' "$dir/respond-$r.txt")
		s_p99=$(awk '/^p50_us/ {print $4}' "$dir/seckill-$r.txt")
		r_p99=$(awk '/^p50_us/ {print $4}' "$dir/respond-$r.txt")
		statuses=$(sed -n 's/^statuses //p' "$dir/seckill-$r.txt")
		awk -v st="$store" -v r="$r" -v s="$s_rps" -v b="$r_rps" -v sp="$s_p99" -v bp="$r_p99" -v c="$statuses" 'BEGIN {
			printf "%s | %d | %.0f | %.0f | %.2f | %.2f ms | %.2f ms | %.2f | %s\n", st, r, s, b, s / b, sp / 1000, bp / 1000, sp / bp, c }'
	done
	kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
done
echo "# load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
