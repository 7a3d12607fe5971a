package redisstore_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// BenchmarkRedisResult measures result polls (Store.AppendResult, what the edge's result call
// runs) at 64 concurrent callers on a private redis-server: "hit" polls a winner's record,
// "miss" a user without one; "plain" sends each poll on its own, "autopipeline" through go-redis's
// auto-pipeliner (Options.AutoPipeline, Caddyfile store redis { auto_pipeline }), which
// puts concurrent polls into shared writes and reads. Besides ns/op it reports the CPU time per
// poll of this process (client_µs/op, from getrusage, the benchmark's own loop included) and of
// redis-server (server_µs/op, from INFO cpu): on a machine whose cores the gateway and Redis
// share, that is what a poll costs the sale.
func BenchmarkRedisResult(b *testing.B) {
	srv := testsrv.StartRedis(b)
	for _, path := range []string{"hit", "miss"} {
		for _, m := range []struct {
			name string
			opts redisstore.Options
		}{
			{"plain", redisstore.Options{}},
			{"autopipeline", redisstore.Options{AutoPipeline: true}},
		} {
			b.Run(path+"_"+m.name, func(b *testing.B) {
				redisBenchResult(b, srv.Addr, m.opts, path == "hit")
			})
		}
	}
}

func redisBenchResult(b *testing.B, addr string, opts redisstore.Options, hit bool) {
	ctx := context.Background()
	s, raw := redisTestStore(b, addr, opts, func(o *redis.Options) { o.PoolSize = redisBenchClients })
	_ = s.Delete(ctx, "poll", true)
	if _, err := s.Define(ctx, redisOpen("poll", 1<<40, 1), true); err != nil {
		b.Fatal(err)
	}
	const users = 1024
	for i := range users {
		if _, err := s.Admit(ctx, admission.Request{Activity: "poll", User: "u" + strconv.Itoa(i), Qty: 1, RequestID: "r"}); err != nil {
			b.Fatal(err)
		}
	}
	prefix := "u"
	if !hit {
		prefix = "nobody-"
	}
	ids := make([]string, users)
	for i := range ids {
		ids[i] = prefix + strconv.Itoa(i)
	}
	var (
		next atomic.Int64
		bad  atomic.Int64
	)
	b.SetParallelism((redisBenchClients + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ReportAllocs()
	server0, client0 := serverCPU(b, raw), testsrv.ProcessCPU(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, 0, 256)
		for pb.Next() {
			user := ids[next.Add(1)%users]
			var (
				code string
				err  error
			)
			buf, code, err = s.AppendResult(ctx, buf[:0], "poll", user)
			if hit && (err != nil || code != "queued") || !hit && !errors.Is(err, admission.ErrNotFound) {
				bad.Add(1)
			}
		}
	})
	b.StopTimer()
	client, server := testsrv.ProcessCPU(b)-client0, serverCPU(b, raw)-server0
	if n := bad.Load(); n > 0 {
		b.Fatalf("%d of %d polls failed or had an unexpected answer", n, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "polls/s")
	b.ReportMetric(float64(client.Nanoseconds())/1e3/float64(b.N), "client_µs/op")
	b.ReportMetric(float64(server.Nanoseconds())/1e3/float64(b.N), "server_µs/op")
}
