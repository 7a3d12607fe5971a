#!/usr/bin/env bash
# Every goal of docs/BENCHMARKS.md in one command (make bench-goals): builds the gateway, the order
# backend and the bench once, runs each variant the goals are measured on, and prints each run's
# "seckill vs Caddy respond" table. Each run's full report, JSON and chart stay in the output
# directory (default bench-goals/). The exit status is non-zero when any run broke an invariant or
# could not be carried out. It takes about 25 minutes on a 2-core machine, most of it the three
# million-user bursts (one per store) and their soaks.
set -uo pipefail
cd "$(dirname "$0")/.."
go=${GO:-go}
mkdir -p "${1:-bench-goals}" || exit 3
out=$(cd "${1:-bench-goals}" && pwd) || exit 3 # absolute: the bench starts the binaries in its work directory
"$go" build -o "$out/caddy" ./cmd/caddy &&
	"$go" build -o "$out/orderbackend" ./cmd/orderbackend &&
	"$go" build -o "$out/seckill-bench" ./cmd/seckill-bench || exit 3

# Each bench runs in the background so that a signal to this script reaches it at once (bash runs a
# trap only once the foreground command has ended): it then stops its gateway and children (they
# are started on free ports, checked free before and unshared after the start) and keeps their logs
# in its work directory, which it names. A parent-death signal does the same when this script is
# killed with SIGKILL.
child=""
stop_child() {
	if [ -n "$child" ]; then kill -TERM "$child" 2>/dev/null; wait "$child" 2>/dev/null; fi
}
trap 'stop_child; exit 130' INT
trap 'stop_child; exit 143' TERM
trap 'stop_child; exit 129' HUP
pdeath=()
if command -v setpriv >/dev/null; then pdeath=(setpriv --pdeathsig TERM); fi

status=0
run() {
	local name=$1
	shift
	echo "== $name: seckill-bench $*"
	"${pdeath[@]}" "$out/seckill-bench" -gateway-bin "$out/caddy" -quiet -json "$out/$name.json" -svg "$out/$name.svg" "$@" >"$out/$name.txt" 2>&1 &
	child=$!
	wait "$child"
	local rc=$?
	child=""
	sed -n '/^seckill vs Caddy respond/,/^$/p' "$out/$name.txt"
	grep -E '^(RESULT|machine):|^sold [0-9]+ items|^gateway \(pid|^gateway memory goal' "$out/$name.txt"
	if [ $rc -ne 0 ]; then
		echo "   exit $rc: see $out/$name.txt"
		status=1
	fi
}

run closed-memory                                     # sold-out, buy path (memory) and p99 goals
run closed-embedded -orders embedded                  # p99 with the embedded order backend
run closed-redis -store redis -orders standalone -orderbackend-bin "$out/orderbackend" # Redis goals
run classic -scenario burst -users 1000000 -soak 4m  # the classic test: memory after a million users, a 2-minute soak
run classic-local -store local -scenario burst -users 1000000 -soak 60s # the same on store local, a 30-second soak
run classic-redis -store redis -scenario burst -users 1000000 -soak 60s # the same on a private redis-server
exit $status
