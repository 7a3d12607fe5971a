package redisstore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// BenchmarkRedisBucketsCluster measures winning admissions per second of one activity on a
// Cluster of three masters (and three replicas), 64 concurrent callers, not split and split into
// 8 buckets (docs/BENCHMARKS.md), with group admission (the default) and with one script call
// per Admit (AdmitBatch 1). Every call is a new user, so every call wins.
func BenchmarkRedisBucketsCluster(b *testing.B) {
	cluster := testsrv.StartCluster(b)
	var seq atomic.Int64
	for _, mode := range []struct {
		name  string
		batch int
	}{{"grouped", 0}, {"single", 1}} {
		for _, n := range []int{0, 8} {
			b.Run(mode.name+"_buckets_"+strconv.Itoa(n), func(b *testing.B) {
				benchBuckets(b, cluster, redisstore.Options{AdmitBatch: mode.batch, KeyPrefix: "bench" + strconv.Itoa(int(seq.Add(1)))}, n)
			})
		}
	}
}

func benchBuckets(b *testing.B, cluster *testsrv.Cluster, opts redisstore.Options, n int) {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), MaxRetries: 3, PoolSize: 128})
	s, err := redisstore.New(c, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	now := time.Now()
	a := admission.Activity{ID: "hot", Stock: 1 << 40, Limit: 1, Buckets: n,
		Start: now.Add(-time.Minute), End: now.Add(time.Hour)}
	if _, err := s.Define(context.Background(), a, false); err != nil {
		b.Fatal(err)
	}
	var user atomic.Int64
	b.SetParallelism(64)
	b.ResetTimer()
	began := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			u := "u" + strconv.FormatInt(user.Add(1), 10)
			d, err := s.Admit(ctx, admission.Request{Activity: "hot", User: u, Qty: 1, RequestID: "r"})
			if err != nil || d.Outcome != admission.Won {
				b.Errorf("admit: %+v, %v", d, err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(began).Seconds(), "admits/s")
}
