#!/usr/bin/env bash
# Runs one fuzz target: scripts/fuzz.sh PACKAGE TARGET FUZZTIME MINIMIZETIME.
#
# Go before 1.27 can fail a target that found nothing with a bare "context deadline exceeded" just
# after -fuzztime ends: a race in its fuzzing coordinator between the deadline and the workers'
# context (golang/go#75804, fixed in Go 1.27). A real finding always writes a crasher first
# ("Failing input written to testdata/fuzz/..."), so a run that failed with that message and wrote
# nothing is run again, at most twice; anything else fails at once.
set -uo pipefail
pkg=$1 target=$2 fuzztime=$3 minimize=$4
go=${GO:-go}
for attempt in 1 2 3; do
	out=$(mktemp)
	"$go" test "$pkg" -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -fuzzminimizetime "$minimize" 2>&1 | tee "$out"
	rc=${PIPESTATUS[0]}
	if [ "$rc" -eq 0 ]; then
		rm -f "$out"
		exit 0
	fi
	if grep -q 'Failing input written to' "$out" || ! grep -q '^    context deadline exceeded$' "$out"; then
		rm -f "$out"
		exit "$rc"
	fi
	rm -f "$out"
	echo "fuzz.sh: $target failed with the Go coordinator's deadline race and wrote no crasher (golang/go#75804); run $attempt of 3" >&2
done
echo "fuzz.sh: $target: giving up after 3 runs that each failed that way; run it alone to look" >&2
exit 1
