#!/usr/bin/env bash
# Instructions redis-server executes per admission of admit.lua, by path and batch size: the
# load-independent measure of docs/admission.md ("What a won admission costs"). It starts a private
# redis-server under valgrind --tool=callgrind on a free port in a temporary directory, runs
# BenchmarkRedisAdmitScript against it (SECKILL_BENCH_REDIS_ADDR) twice per case, with a small and
# a large count, and divides the difference of the server's instruction counts by the difference
# of the counts, so that defining the activity, loading the script and the benchmark's own
# bookkeeping cancel out. "won_sale512" is the average of wins 65 to 512 of an activity, while its
# hashes may still be small (docs/admission.md, "Small hashes"); the other cases count wins and
# refusals 641 to 6,400 (65 to 640 in batches of 1). Takes a few minutes; needs valgrind,
# redis-server, redis-cli and python3. ADMISSION_TEST names a test binary of ./admission/redisstore
# built beforehand (go test -c), for instance from another revision, instead of building one.
# BENCH names the benchmark, without its Benchmark prefix (default RedisAdmitScript, the one with
# these cases; another revision's binary may have another with the same cases and calls).
# Usage: [ADMISSION_TEST=<binary>] [BENCH=<name>] scripts/callgrind-admit.sh [case-regexp]
#        (default: every case: won_batch64 won_sale512 won_batch1 sold_out_batch64 sold_out_batch1)
set -euo pipefail
cd "$(dirname "$0")/.."
go=${GO:-go}
bench=Benchmark${BENCH:-RedisAdmitScript}
for t in valgrind callgrind_control redis-server redis-cli python3; do
	command -v "$t" >/dev/null || { echo "callgrind-admit: $t not found" >&2; exit 3; }
done
dir=$(mktemp -d)
vg=
cleanup() {
	if [ -n "$vg" ]; then kill "$vg" 2>/dev/null && wait "$vg" 2>/dev/null || true; fi
	rm -rf "$dir"
}
trap cleanup EXIT
bin=${ADMISSION_TEST:-$dir/admission.test}
[ -n "${ADMISSION_TEST:-}" ] || "$go" test -c -o "$bin" ./admission/redisstore
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# hz 1: the server's timer work, which grows with the run's duration, stays negligible.
valgrind --tool=callgrind --callgrind-out-file="$dir/cg.%n" redis-server --port "$port" \
	--bind 127.0.0.1 --dir "$dir" --save '' --appendonly no --hz 1 >"$dir/server.log" 2>&1 &
vg=$!
for _ in $(seq 120); do
	redis-cli -p "$port" ping >/dev/null 2>&1 && break
	sleep 0.5
done
redis-cli -p "$port" ping >/dev/null

# instructions runs the benchmark case $1 with $2 admissions on an empty server and prints the
# instructions the server executed meanwhile.
instructions() {
	redis-cli -p "$port" flushall >/dev/null
	callgrind_control -z "$vg" >/dev/null 2>&1
	(cd admission/redisstore && SECKILL_BENCH_REDIS_ADDR=127.0.0.1:$port "$bin" \
		-test.run '^$' -test.bench "^$bench\$/^$1\$" -test.benchtime "$2x" >"$dir/bench.log" 2>&1) ||
		{ cat "$dir/bench.log" >&2; exit 1; }
	local before
	before=$(ls "$dir" | grep -c '^cg\.' || true)
	callgrind_control -d "$vg" >/dev/null 2>&1
	for _ in $(seq 60); do
		[ "$(ls "$dir" | grep -c '^cg\.' || true)" -gt "$before" ] && break
		sleep 0.5
	done
	sleep 0.5 # the dump is complete once its totals line is written
	grep -hE '^(summary|totals):' "$(ls -t "$dir"/cg.* | head -1)" | head -1 | awk '{print $2}'
}

echo "$bench"
printf '%-20s %s\n' case 'instructions/admission'
for c in won_batch64 won_sale512 won_batch1 sold_out_batch64 sold_out_batch1; do
	[[ $c =~ ${1:-.} ]] || continue
	cas=$c
	case $c in
	won_sale512) cas=won_batch64 small=64 large=512 ;;
	*batch64) small=640 large=6400 ;;
	*) small=64 large=640 ;;
	esac
	a=$(instructions "$cas" $small)
	b=$(instructions "$cas" $large)
	printf '%-20s %d\n' "$c" $(((b - a) / (large - small)))
done
