package admission_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/admissiontest"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestRedisBuckets runs the split-activity cases on one server, with the rebalancer off (pulls
// alone must keep every promise) and on.
func TestRedisBuckets(t *testing.T) {
	srv := testsrv.StartRedis(t)
	var n atomic.Int64
	for _, v := range []struct {
		name string
		opts admission.RedisOptions
	}{
		{"pulls_only", admission.RedisOptions{RebalanceInterval: -1}},
		{"rebalancer", admission.RedisOptions{}},
		{"single_calls", admission.RedisOptions{AdmitBatch: 1, RebalanceInterval: -1}},
	} {
		t.Run(v.name, func(t *testing.T) {
			admissiontest.RunBuckets(t, func(t *testing.T) admission.Store {
				opts := v.opts
				opts.KeyPrefix = fmt.Sprintf("bk%d", n.Add(1))
				s, _ := redisTestStore(t, srv.Addr, opts, nil)
				return s
			})
		})
	}
}

// TestRedisBucketsCluster runs them on a Cluster of three masters and three replicas, where the
// buckets are on different shards.
func TestRedisBucketsCluster(t *testing.T) {
	cluster := testsrv.StartCluster(t)
	var n atomic.Int64
	admissiontest.RunBuckets(t, func(t *testing.T) admission.Store {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), MaxRetries: 3})
		s, err := admission.NewRedisStore(c, admission.RedisOptions{KeyPrefix: fmt.Sprintf("bk%d", n.Add(1))})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
