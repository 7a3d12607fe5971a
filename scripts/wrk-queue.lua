-- wrk script for scripts/bench-wrk-queue.sh: the waiting room's calls for the users of a file
-- made by `seckill-bench wrk-requests`, each user in turn, split over wrk's threads (thread k
-- takes lines k, k+T, k+2T, ...).
--
--   wrk -t T -c C -d 5s --latency -s scripts/wrk-queue.lua http://HOST:PORT -- FILE PREFIX T METHOD
--
-- FILE holds one buy per line: path, authorization, X-Forwarded-For, Idempotency-Key (tabs); the
-- activity is taken from the path (/seckill/<activity>/buy/<hash>). METHOD is POST (join) or GET
-- (poll) of /seckill/<activity>/queue. PREFIX goes before every path: "" for the seckill route,
-- "/baseline" for the respond yardstick, which thus receives the very same requests. A thread
-- that runs out of users starts again from its first; done() reports how often.

local threads = {}

function setup(thread)
	thread:set("id", #threads)
	table.insert(threads, thread)
end

function init(args)
	local file, prefix, nthreads, method = args[1], args[2] or "", tonumber(args[3] or "1"), args[4] or "GET"
	reqs, idx, wrapped, statuses = {}, 0, 0, {}
	local n = 0
	for line in io.lines(file) do
		if n % nthreads == id then
			local path, auth, xff = line:match("^([^\t]+)\t([^\t]+)\t([^\t]+)\t")
			local act = path:match("^(/[^/]+/[^/]+)/")
			reqs[#reqs + 1] = wrk.format(method, prefix .. act .. "/queue", {
				["Authorization"] = auth, ["X-Forwarded-For"] = xff,
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
	io.write(string.format("statuses %s; rounds over the users: %d\n", table.concat(parts, " "), wraps))
	io.write(string.format("p50_us %d p99_us %d\n", latency:percentile(50), latency:percentile(99)))
end
