# Shell functions shared by scripts/bench-wrk.sh and scripts/bench-wrk-queue.sh, which source it.
# They use the caller's variables: me (the script's name, for messages), here (the checkout), GO,
# BIN and KEEP (optional), dir (the current store's folder), PORT, ADMIN_PORT, ACTIVITIES,
# REPEATS, GATEWAY_ENV (optional), and those bench_setup sets: work (the temporary folder, with
# the caddy and seckill-bench binaries), checker (a seckill-bench with the check-port command),
# base (the gateway's URL), secret, hz, pdeath (the parent-death prefix, possibly empty), pid and
# rpid (the gateway's and redis-server's), child (the command run runs).
# shellcheck shell=bash

# bench_setup makes work (/tmp/$1-XXXXXX) and puts the binaries in it (from BIN, or built from
# the checkout), sets the variables above, and traps every exit to stop the gateway, redis-server
# and run's command: the work folder goes, but after a failure its logs stay, and with KEEP all of it.
# shellcheck disable=SC2034 # the variables it sets are the calling script's
bench_setup() {
	work=$(mktemp -d "/tmp/$1-XXXXXX")
	pid=""
	rpid=""
	child=""
	trap bench_cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	trap 'exit 129' HUP
	# A parent-death signal takes the gateway along even when the script is killed with SIGKILL.
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
}

bench_cleanup() {
	local rc=$?
	if [ -n "$child" ]; then kill "$child" 2>/dev/null || true; wait "$child" 2>/dev/null || true; fi
	stop pid
	stop rpid
	if [ -n "${KEEP:-}" ]; then echo "$me: kept $work" >&2; return; fi
	if [ "$rc" -eq 0 ] || ! compgen -G "$work/*/*.log" >/dev/null; then
		rm -rf "$work"
	else
		echo "$me: failed (exit $rc); the logs (caddy.log, redis.log) are kept in $work" >&2
	fi
}

# run runs a command in the background and waits for it, so that a signal to the script is acted
# on at once (bash runs a trap only once the foreground command has ended) and the command stopped.
run() {
	"$@" &
	child=$!
	local rc=0
	wait "$child" || rc=$?
	child=""
	return "$rc"
}

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

# median prints the median of the numbers on stdin, then their least and greatest.
median() { sort -n | awk '{ v[NR] = $1 } END { printf "%.2f, %.2f–%.2f", (v[int((NR + 1) / 2)] + v[int(NR / 2) + 1]) / 2, v[1], v[NR] }'; }

# cpu_ticks prints the CPU time (user + system, in clock ticks) process $1 has used.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# start_redis starts a private redis-server (no persistence) on 127.0.0.1:$2, with its folder
# $dir/redis and its log $dir/redis.log, puts its pid in the variable named $1 and waits until it
# answers. A port something answers on already is refused: a test must not use someone's server.
start_redis() {
	local port=$2 p
	if ! "$checker" check-port "127.0.0.1:$port"; then
		echo "$me: refusing to start redis-server on 127.0.0.1:$port: stop what answers there or set REDIS_PORT" >&2
		exit 3
	fi
	mkdir -p "$dir/redis"
	"${pdeath[@]}" redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir/redis" > "$dir/redis.log" 2>&1 &
	p=$!
	printf -v "$1" '%s' "$p"
	for _ in $(seq 50); do
		if redis-cli -p "$port" ping >/dev/null 2>&1; then
			# The answer must be ours: a server that took the port meanwhile is not to be used.
			kill -0 "$p" 2>/dev/null && "$checker" check-port -pid "$p" "127.0.0.1:$port" && return 0
			break
		fi
		sleep 0.1
	done
	echo "$me: redis-server did not start on 127.0.0.1:$port; the end of $dir/redis.log:" >&2
	tail -n 20 "$dir/redis.log" >&2
	exit 3
}

# flush_redis empties the private redis-server of pid $2 on 127.0.0.1:$1, once it is checked to
# be that process that answers there: never someone else's server.
flush_redis() {
	if ! kill -0 "$2" 2>/dev/null || ! "$checker" check-port -pid "$2" "127.0.0.1:$1"; then
		echo "$me: refusing to flush 127.0.0.1:$1: the redis-server this script started does not answer there" >&2
		exit 3
	fi
	redis-cli -p "$1" flushall >/dev/null
}

# pick_checker sets checker to a seckill-bench with the check-port command: the one in $work, or,
# when that one (from BIN) is older than the command, one built from this checkout ($here).
pick_checker() {
	checker="$work/seckill-bench"
	if ! "$checker" check-port 127.0.0.1:1 >/dev/null 2>&1; then
		checker="$work/check-port"
		(cd "$here" && $GO build -o "$checker" ./cmd/seckill-bench)
	fi
}

# start_gateway starts the gateway of $dir/Caddyfile in $dir (its log appended to $dir/caddy.log),
# puts its pid in pid and waits until every activity answers: Caddy starts its apps in no fixed
# order, so the server may answer while the activities are still being defined (a 404 for the later
# ones meanwhile). Caddy listens with SO_REUSEPORT: on a port a gateway left running (or anything
# else) holds, a new one starts too and the kernel splits the connections between the two, whose
# hashed-URL salts and stores differ (404s, 401s, sold-outs that are not). Such a port is refused,
# before the start and once it answers.
start_gateway() {
	if ! "$checker" check-port "127.0.0.1:$PORT" "127.0.0.1:$ADMIN_PORT"; then
		echo "$me: refusing to start a gateway on 127.0.0.1:$PORT (admin 127.0.0.1:$ADMIN_PORT): stop what answers there or set PORT and ADMIN_PORT" >&2
		exit 3
	fi
	# shellcheck disable=SC2086 # GATEWAY_ENV is split into its words on purpose
	(cd "$dir" && exec "${pdeath[@]}" env ${GATEWAY_ENV:-} "$work/caddy" run --config Caddyfile --adapter caddyfile >> caddy.log 2>&1) &
	pid=$!
	local ok=0 i
	for _ in $(seq 100); do
		kill -0 "$pid" 2>/dev/null || break
		ok=1
		for i in $(seq 0 $(( ACTIVITIES - 1 ))); do curl -fs "$base/seckill/bench-$i" >/dev/null 2>&1 || { ok=0; break; }; done
		[ "$ok" = 1 ] && break
		sleep 0.2
	done
	if [ "$ok" != 1 ] || ! kill -0 "$pid" 2>/dev/null; then
		echo "$me: the gateway did not start; the end of $dir/caddy.log:" >&2
		tail -n 20 "$dir/caddy.log" >&2
		exit 3
	fi
	if ! "$checker" check-port -pid "$pid" "127.0.0.1:$PORT" "127.0.0.1:$ADMIN_PORT"; then
		echo "$me: another process took the gateway's port meanwhile; the end of $dir/caddy.log:" >&2
		tail -n 20 "$dir/caddy.log" >&2
		exit 3
	fi
}

# machine prints the whole machine's idle and iowait ticks, all its ticks, and its context switches
# so far (/proc/stat): whether a run left the cores idle, and how often the kernel switched tasks.
machine() { awk '/^cpu / { i = $5 + $6; t = 0; for (k = 2; k <= NF; k++) t += $k } /^ctxt / { c = $2 } END { print i, t, c }' /proc/stat; }

# machine_share prints, from machine's lines $1 before and $2 after a run of $3 requests, the
# machine's idle share and its context switches per request.
machine_share() {
	echo "$1 $2" | awk -v n="$3" '{ printf "idle %.0f %%, %.2f context switches/req", 100 * ($4 - $1) / ($5 - $2), ($6 - $3) / n }'
}

# row prints round $3 of the measured run $1 against the respond run $2, labelled $4, with the
# notes $5 after its statuses, and appends its figures to $dir/rounds. It reads the files of each
# run in $dir: name.txt (wrk's output), name.cpu (the gateway's CPU µs per request), name.rcpu
# (redis-server's CPU µs per win or request, "-" without it) and name.mach (machine_share).
row() {
	local s=$1 b=$2 r=$3 label=$4 notes=$5 s_rps r_rps s_p99 r_p99 rcpu statuses
	s_rps=$(awk '/^Requests\/sec/ {print $2}' "$dir/$s.txt")
	r_rps=$(awk '/^Requests\/sec/ {print $2}' "$dir/$b.txt")
	s_p99=$(awk '/^p50_us/ {print $4}' "$dir/$s.txt")
	r_p99=$(awk '/^p50_us/ {print $4}' "$dir/$b.txt")
	rcpu=$(cat "$dir/$s.rcpu")
	statuses="$(sed -n 's/^statuses //p' "$dir/$s.txt")$notes; machine: $(cat "$dir/$s.mach") (respond: $(cat "$dir/$b.mach"))"
	awk -v st="$label" -v r="$r" -v s="$s_rps" -v b="$r_rps" -v sp="$s_p99" -v bp="$r_p99" -v c="$statuses" \
		-v sc="$(cat "$dir/$s.cpu")" -v rc="$(cat "$dir/$b.cpu")" -v rd="$rcpu" 'BEGIN {
		printf "%s | %d | %.0f | %.0f | %.2f | %.2f ms | %.2f ms | %.2f | %.1f µs | %.1f µs | %s | %s\n", st, r, s, b, s / b, sp / 1000, bp / 1000, sp / bp, sc, rc, (rd == "-" ? "-" : rd " µs"), c }'
	echo "$s_rps $r_rps $(cat "$dir/$s.cpu") $(cat "$dir/$b.cpu") $s_p99 $r_p99 $rcpu" >> "$dir/rounds"
}

# medians prints the medians over the rounds of folder $1 (row's): the ratio, the p99 ratio and
# the gateway's CPU per request ($2's, e.g. buy) over respond's of the same round (the machine's
# speed cancels out of it).
medians() {
	echo "ratio median $(awk '{ print $1 / $2 }' "$1/rounds" | median) over $REPEATS rounds;" \
		"p99 ratio median $(awk '{ print $5 / $6 }' "$1/rounds" | median);" \
		"$2 CPU ÷ respond CPU median $(awk '{ print $3 / $4 }' "$1/rounds" | median)"
}
