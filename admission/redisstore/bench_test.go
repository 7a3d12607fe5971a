package redisstore_test

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// redisBenchClients is the number of concurrent callers, as in redis-benchmark -c 64.
const redisBenchClients = 64

// BenchmarkRedisAdmit measures admissions per second at 64 concurrent callers on a private
// redis-server and compares them with what the same server does for the cheapest possible script,
// redis-benchmark -c 64 EVAL "return 1" 0: the ratio says how much of the server's script
// throughput the admit script's work and the Go client leave. It also reports the p50 and p99
// latency of one Admit, in µs, the CPU time per Admit of this process (client_µs/op, the
// benchmark's loop included) and of redis-server (server_µs/op, from INFO cpu), and the time
// redis-server spent running admit.lua per Admit (script_µs/op: the usec of EVALSHA and EVAL in
// INFO commandstats; the script alone, without parsing, the round trip or the reply).
//
// Each path runs in three modes: "single" (Options.AdmitBatch 1: one script call per Admit,
// as a plain client would), "single_autopipeline" (the same through go-redis's auto-pipeliner)
// and "grouped" (the default: concurrent calls for the activity share script calls).
//
// The machine is shared and its load moves, so for each long run the baseline is measured again
// right before and right after it, and the ratio uses the mean of those two adjacent figures.
func BenchmarkRedisAdmit(b *testing.B) {
	srv := testsrv.StartRedis(b)
	baseline := redisBenchmarkEval(b, srv.Addr)
	modes := []struct {
		name string
		opts redisstore.Options
	}{
		{"single", redisstore.Options{AdmitBatch: 1}},
		{"single_autopipeline", redisstore.Options{AdmitBatch: 1, AutoPipeline: true}},
		{"grouped", redisstore.Options{}},
	}
	for _, path := range []struct {
		name  string
		stock int64
		want  admission.Outcome
	}{
		// Stock that cannot run out and one new user per call: every call takes the full won path
		// (all checks, DECRBY, the :meta counters, XADD, the HSET of :users).
		{"won", 1 << 50, admission.Won},
		{"sold_out", 0, admission.SoldOut},
	} {
		for _, m := range modes {
			b.Run(path.name+"_"+m.name, func(b *testing.B) {
				redisBenchAdmit(b, srv.Addr, baseline, m.opts, path.stock, path.want)
			})
		}
	}
}

func redisBenchAdmit(b *testing.B, addr string, baseline float64, opts redisstore.Options, stock int64, want admission.Outcome) {
	ctx := context.Background()
	s, raw := redisTestStore(b, addr, opts, func(o *redis.Options) {
		o.PoolSize = redisBenchClients
	})
	_ = s.Delete(ctx, "bench", true) // left by an earlier run
	if _, err := s.Define(ctx, redisOpen("bench", stock, 1), true); err != nil {
		b.Fatal(err)
	}
	// Load the script so that the first calls do not pay for the EVAL fallback.
	if _, err := s.Admit(ctx, admission.Request{Activity: "bench", User: "warm-up", Qty: 1, RequestID: "r"}); err != nil {
		b.Fatal(err)
	}

	long := baseline > 0 && b.N >= 5000
	var before float64
	if long {
		before = redisBenchmarkEval(b, addr)
	}

	var (
		next int64
		bad  atomic.Int64
		lat  = make([]time.Duration, b.N)
	)
	b.SetParallelism((redisBenchClients + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ReportAllocs()
	server0, client0, script0 := serverCPU(b, raw), testsrv.ProcessCPU(b), scriptUsec(b, raw)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := atomic.AddInt64(&next, 1)
			user := "u" + strconv.FormatInt(i, 10)
			t0 := time.Now()
			d, err := s.Admit(ctx, admission.Request{Activity: "bench", User: user, Qty: 1, RequestID: "r"})
			lat[i-1] = time.Since(t0)
			if err != nil || d.Outcome != want {
				bad.Add(1)
			}
		}
	})
	b.StopTimer()
	client, server := testsrv.ProcessCPU(b)-client0, serverCPU(b, raw)-server0
	script := scriptUsec(b, raw) - script0
	if n := bad.Load(); n > 0 {
		b.Fatalf("%d of %d admissions failed or had an unexpected outcome", n, b.N)
	}
	b.ReportMetric(float64(client.Nanoseconds())/1e3/float64(b.N), "client_µs/op")
	b.ReportMetric(float64(server.Nanoseconds())/1e3/float64(b.N), "server_µs/op")
	b.ReportMetric(float64(script)/float64(b.N), "script_µs/op")
	perSec := float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(perSec, "admits/s")
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50_µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99_µs")
	if long {
		_ = s.Delete(ctx, "bench", true) // the baseline runs on an empty server, as before
		baseline = (before + redisBenchmarkEval(b, addr)) / 2
	}
	if baseline > 0 {
		b.ReportMetric(baseline, "eval_baseline/s")
		b.ReportMetric(perSec/baseline, "ratio")
	}
}

var redisBenchRPS = regexp.MustCompile(`([0-9.]+) requests per second`)

// redisBenchmarkEval runs redis-benchmark against the server and returns its EVAL rate, or 0 (with
// a logged reason) when the tool is not installed.
func redisBenchmarkEval(b *testing.B, addr string) float64 {
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		b.Log("redis-benchmark not found (Debian: apt-get install redis-tools): no baseline, no ratio")
		return 0
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		b.Fatal(err)
	}
	out, err := exec.Command(bin, "-h", host, "-p", port, "-c", strconv.Itoa(redisBenchClients), "-n", "200000", "-q",
		"EVAL", "return 1", "0").CombinedOutput()
	if err != nil {
		b.Fatalf("redis-benchmark: %v: %s", err, out)
	}
	m := redisBenchRPS.FindAllSubmatch(out, -1)
	if len(m) == 0 {
		b.Fatalf("redis-benchmark: no rate in %q", out)
	}
	rps, err := strconv.ParseFloat(string(m[len(m)-1][1]), 64)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("redis-benchmark -c %d -n 200000 EVAL \"return 1\" 0: %.0f requests/s", redisBenchClients, rps)
	return rps
}

// serverCPU returns the CPU time redis-server has used.
func serverCPU(b *testing.B, c *redis.Client) time.Duration {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	return testsrv.RedisCPU(b, info)
}

// scriptUsec returns the µs redis-server has spent running scripts (EVALSHA and EVAL), from INFO
// commandstats.
func scriptUsec(b *testing.B, c *redis.Client) int64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	return testsrv.RedisCommandUsec(b, info, "evalsha", "eval")
}

// redisShardBatch is the requests per script call of BenchmarkRedisAdmitShard, the store's
// default AdmitBatch.
const redisShardBatch = 64

// BenchmarkRedisAdmitShard measures what one shard takes when the client is light: redis-benchmark
// itself (C, one thread) calls the admission script directly (EVALSHA of admit.lua), -c 64
// connections, each call 64 requests of users u__rand_int__ (every
// occurrence its own random number, of up to 2^31, so the users are new), each winning one item of
// stock that cannot run out. In BenchmarkRedisAdmit the Go callers share the machine's cores with
// redis-server; here the client is a fraction of a core. Beside it, as there, redis-benchmark -c
// 64 EVAL "return 1" 0 on the same server right before and after (ratio: won admissions/s over
// the mean of the two). One op is one admission. It reports wins/s, the ratio, and redis-server's
// CPU (INFO cpu) and script time (INFO commandstats) per win; and it checks afterwards that every
// call ran without error and that the activity took exactly one item per win from as many distinct
// users, all but a few collisions of the random user ids, so that the figure cannot be of failed
// or refused calls.
func BenchmarkRedisAdmitShard(b *testing.B) {
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		b.Skip("redis-benchmark not found (Debian: apt-get install redis-tools)")
	}
	srv := testsrv.StartRedis(b)
	b.Run(fmt.Sprintf("won_batch%d", redisShardBatch), func(b *testing.B) {
		redisBenchShard(b, bin, srv.Addr)
	})
}

func redisBenchShard(b *testing.B, bin, addr string) {
	ctx := context.Background()
	s, raw := redisTestStore(b, addr, redisstore.Options{}, nil)
	const act, stock = "shard", int64(1) << 50
	_ = s.Delete(ctx, act, true) // left by an earlier run
	if _, err := s.Define(ctx, redisOpen(act, stock, 1), true); err != nil {
		b.Fatal(err)
	}
	src, keys := s.AdmitScript(act)
	sha, err := raw.ScriptLoad(ctx, src).Result()
	if err != nil {
		b.Fatal(err)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		b.Fatal(err)
	}
	calls := (b.N + redisShardBatch - 1) / redisShardBatch
	args := []string{"-h", host, "-p", port, "-c", strconv.Itoa(redisBenchClients), "-n", strconv.Itoa(calls),
		"-r", "2147483647", "-q", "EVALSHA", sha, strconv.Itoa(len(keys))}
	args = append(args, keys...)
	for range redisShardBatch {
		args = append(args, "u__rand_int__", "1", "r")
	}

	long := b.N >= 100_000
	var before float64
	if long {
		before = redisBenchmarkEval(b, addr)
	}
	if err := raw.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	server0 := serverCPU(b, raw)
	b.ResetTimer()
	out, err := exec.Command(bin, args...).CombinedOutput()
	b.StopTimer()
	if err != nil {
		b.Fatalf("redis-benchmark: %v: %s", err, out)
	}
	server := serverCPU(b, raw) - server0
	m := redisBenchRPS.FindAllSubmatch(out, -1)
	if len(m) == 0 {
		b.Fatalf("redis-benchmark: no rate in %q", out)
	}
	callsPerSec, err := strconv.ParseFloat(string(m[len(m)-1][1]), 64)
	if err != nil {
		b.Fatal(err)
	}

	// What the calls did: every one ran without error, and the activity's own counts agree.
	info, err := raw.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	ran, failed := redisCommandCalls(b, info, "evalsha")
	if ran != int64(calls) || failed != 0 {
		b.Fatalf("EVALSHA ran %d times, %d failed or rejected; want %d, 0 (%s)", ran, failed, calls, out)
	}
	left, err := raw.Get(ctx, keys[1]).Int64()
	if err != nil {
		b.Fatal(err)
	}
	// keys: meta, stock, users, orders
	wins, err := raw.HGet(ctx, keys[0], "wins").Int64()
	users := raw.HLen(ctx, keys[2]).Val()
	if err != nil {
		b.Fatal(err)
	}
	requests := int64(calls) * redisShardBatch
	// A user drawn twice replays its first answer: with 2^31 ids, about requests²/2^32 of them.
	if taken := stock - left; taken != wins || wins != users || requests-wins > requests/1000+1 {
		b.Fatalf("%d requests: %d items taken, %d wins, %d distinct winners; want all equal and at most %d collisions",
			requests, taken, wins, users, requests/1000+1)
	}
	b.Logf("%d calls of %d: %d wins, %d repeated users", calls, redisShardBatch, wins, requests-wins)

	winsPerSec := callsPerSec * float64(wins) / float64(calls)
	b.ReportMetric(winsPerSec, "wins/s")
	b.ReportMetric(float64(server.Nanoseconds())/1e3/float64(wins), "server_µs/win")
	b.ReportMetric(float64(testsrv.RedisCommandUsec(b, info, "evalsha"))/float64(wins), "script_µs/win")
	if long {
		_ = s.Delete(ctx, act, true) // the baseline runs on an empty server, as before
		if baseline := (before + redisBenchmarkEval(b, addr)) / 2; baseline > 0 {
			b.ReportMetric(baseline, "eval_baseline/s")
			b.ReportMetric(winsPerSec/baseline, "ratio")
		}
	}
}

// redisCommandCalls returns the calls of command in INFO commandstats and how many of them failed
// or were rejected.
func redisCommandCalls(b *testing.B, info, command string) (calls, failed int64) {
	for line := range strings.SplitSeq(info, "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+command+":")
		if !ok {
			continue
		}
		for kv := range strings.SplitSeq(v, ",") {
			k, n, _ := strings.Cut(kv, "=")
			switch k {
			case "calls", "failed_calls", "rejected_calls":
				x, err := strconv.ParseInt(n, 10, 64)
				if err != nil {
					b.Fatalf("INFO commandstats %q: %v", line, err)
				}
				if k == "calls" {
					calls = x
				} else {
					failed += x
				}
			}
		}
	}
	return calls, failed
}
