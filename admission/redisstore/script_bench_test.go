package redisstore

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// BenchmarkRedisAdmitScript measures the admission script alone: one caller sends calls of a
// fixed batch size to a private redis-server, one after the other, and the server's own figures
// give its cost per admission: script_µs/admit from INFO commandstats (the usec of EVALSHA, the
// script's run without parsing or the round trip) and server_µs/admit from INFO cpu (the whole
// server, parsing and replies included). SECKILL_BENCH_CMDSTATS=1 logs INFO commandstats.
// SECKILL_BENCH_REDIS_ADDR=host:port runs it against that server instead of a private one: the
// redis-server under valgrind of scripts/callgrind-admit.sh, whose instructions per admission do
// not depend on the machine's load.
func BenchmarkRedisAdmitScript(b *testing.B) {
	s := redisScriptBenchStore(b)
	for _, path := range []struct {
		name  string
		stock int64
	}{{"won", 1 << 50}, {"sold_out", 0}} {
		for _, batch := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s_batch%d", path.name, batch), func(b *testing.B) {
				redisBenchScript(b, s, luaAdmit, s.admitKeys("script"), path.stock, batch)
			})
		}
	}
}

// redisScriptBenchStore is a store on SECKILL_BENCH_REDIS_ADDR, or else on a private server.
func redisScriptBenchStore(b *testing.B) *Store {
	addr := os.Getenv("SECKILL_BENCH_REDIS_ADDR")
	if addr == "" {
		addr = testsrv.StartRedis(b).Addr
	}
	// Valgrind runs the server about 50 times slower than usual.
	client := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: time.Minute})
	b.Cleanup(func() { _ = client.Close() })
	s, err := New(client, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// keys are the script's KEYS for activity "script".
func redisBenchScript(b *testing.B, s *Store, src string, keys []string, stock int64, batch int) {
	ctx := context.Background()
	_ = s.Delete(ctx, "script", true)
	now := time.Now()
	if _, err := s.Define(ctx, admission.Activity{ID: "script", Stock: stock, Limit: 1, Start: now.Add(-time.Minute),
		End: now.Add(time.Hour), PayWithin: time.Minute}, true); err != nil {
		b.Fatal(err)
	}
	sha, err := s.client.ScriptLoad(ctx, src).Result()
	if err != nil {
		b.Fatal(err)
	}
	head := []any{"evalsha", sha, len(keys)}
	for _, k := range keys {
		head = append(head, k)
	}
	if err := s.client.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	cpu0 := redisServerCPU(b, s.client)
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		args := slices.Clone(head)
		for j := i; j < min(i+batch, b.N); j++ {
			args = append(args, fmt.Sprint("u", j), 1, "r")
		}
		if err := s.client.Do(ctx, args...).Err(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	cpu := redisServerCPU(b, s.client) - cpu0
	info, err := s.client.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	if os.Getenv("SECKILL_BENCH_CMDSTATS") != "" {
		b.Log(info)
	}
	usec := testsrv.RedisCommandUsec(b, info, "evalsha")
	b.ReportMetric(float64(usec)/float64(b.N), "script_µs/admit")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "server_µs/admit")
}

// redisServerCPU is the CPU time redis-server has used (INFO cpu).
func redisServerCPU(b *testing.B, c redis.UniversalClient) time.Duration {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	return testsrv.RedisCPU(b, info)
}
