-- wrk script for scripts/bench-wrk.sh: sends the buys prepared by `seckill-bench wrk-requests`,
-- each once and in order, split over wrk's threads (thread k takes lines k, k+T, k+2T, ...).
--
--   wrk -t T -c C -d 5s --latency -s scripts/wrk-buy.lua http://HOST:PORT -- FILE PREFIX T
--
-- FILE holds one buy per line: path, authorization, X-Forwarded-For, Idempotency-Key (tabs).
-- PREFIX goes before every path: "" for the seckill route, "/baseline" for the respond
-- yardstick, which thus receives the very same requests. A thread that runs out of lines starts
-- again from its first (then a buy is a retry of the same key); done() reports it.

local threads = {}

function setup(thread)
	thread:set("id", #threads)
	table.insert(threads, thread)
end

function init(args)
	local file, prefix, nthreads = args[1], args[2] or "", tonumber(args[3] or "1")
	reqs, idx, wrapped, statuses = {}, 0, 0, {}
	local n = 0
	for line in io.lines(file) do
		if n % nthreads == id then
			local path, auth, xff, key = line:match("^([^\t]+)\t([^\t]+)\t([^\t]+)\t([^\t]+)$")
			reqs[#reqs + 1] = wrk.format("POST", prefix .. path, {
				["Authorization"] = auth, ["X-Forwarded-For"] = xff, ["Idempotency-Key"] = key,
			})
		end
		n = n + 1
	end
end

function request()
	idx = idx + 1
	if idx > #reqs then
		idx, wrapped = 1, wrapped + 1
	end
	return reqs[idx]
end

function response(status, headers, body)
	statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
	local total, wraps = {}, 0
	for _, t in ipairs(threads) do
		wraps = wraps + t:get("wrapped")
		for s, c in pairs(t:get("statuses")) do
			total[s] = (total[s] or 0) + c
		end
	end
	local parts = {}
	for s, c in pairs(total) do
		parts[#parts + 1] = s .. ":" .. c
	end
	table.sort(parts)
	io.write(string.format("statuses %s; threads that ran out of buys: %d\n", table.concat(parts, " "), wraps))
	io.write(string.format("p50_us %d p99_us %d\n", latency:percentile(50), latency:percentile(99)))
end
