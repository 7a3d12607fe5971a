# Shell functions shared by scripts/bench-wrk.sh and scripts/bench-wrk-queue.sh, which source it.
# They use the caller's variables: me (the script's name, for messages), work (its temporary
# folder, with the caddy and seckill-bench binaries), dir (the current store's folder), checker (a
# seckill-bench with the check-port command), base (the gateway's URL), PORT, ADMIN_PORT,
# ACTIVITIES, GATEWAY_ENV (optional) and pdeath (the parent-death prefix, possibly empty).
# shellcheck shell=bash

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
