package redisstore_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/admissiontest"
	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// layout2 is Options with the one-field-per-user layout on (Options.Layout).
func layout2(v redisstore.Options) redisstore.Options {
	v.Layout = 2
	return v
}

// TestRedisLayout2Conformance runs the conformance suite on activities of layout 2, on one
// server, grouped, auto-pipelined and one call per Admit.
func TestRedisLayout2Conformance(t *testing.T) {
	srv := testsrv.StartRedis(t)
	var n atomic.Int64
	redisVariants(t, func(t *testing.T, v redisstore.Options) {
		admissiontest.Run(t, func(t *testing.T) admission.Store {
			opts := layout2(v)
			opts.KeyPrefix = fmt.Sprintf("l2conf%d", n.Add(1))
			s, _ := redisTestStore(t, srv.Addr, opts, nil)
			return s
		})
	})
}

// TestRedisLayout2ClusterConformance runs it on the private 3+3 Cluster.
func TestRedisLayout2ClusterConformance(t *testing.T) {
	cluster := testsrv.StartCluster(t)
	var n atomic.Int64
	admissiontest.Run(t, func(t *testing.T) admission.Store {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), MaxRetries: 3})
		s, err := redisstore.New(c, layout2(redisstore.Options{KeyPrefix: fmt.Sprintf("l2cc%d", n.Add(1))}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

// TestRedisLayout2Buckets runs the split-activity cases with layout 2: every bucket gets the
// parent's layout and runs the layout-2 scripts.
func TestRedisLayout2Buckets(t *testing.T) {
	srv := testsrv.StartRedis(t)
	var n atomic.Int64
	redisBucketVariants(t, func(t *testing.T, v redisstore.Options) {
		admissiontest.RunBuckets(t, func(t *testing.T) admission.Store {
			opts := layout2(v)
			opts.KeyPrefix = fmt.Sprintf("l2bk%d", n.Add(1))
			s, _ := redisTestStore(t, srv.Addr, opts, nil)
			return s
		})
	})
}

// TestRedisLayout2ReplicasAckConformance runs it with replicas_ack (a private master and
// replica): one WAIT per admit_v2.lua call and per release_v2.lua call.
func TestRedisLayout2ReplicasAckConformance(t *testing.T) {
	master := testsrv.StartRedis(t)
	testsrv.StartReplica(t, master)
	var n atomic.Int64
	admissiontest.Run(t, func(t *testing.T) admission.Store {
		opts := layout2(redisstore.Options{ReplicasAck: 1, ReplicasAckTimeout: 5 * time.Second})
		opts.KeyPrefix = fmt.Sprintf("l2ack%d", n.Add(1))
		s, _ := redisTestStore(t, master.Addr, opts, nil)
		return s
	})
}

// TestRedisLayout2SentinelConformance runs it through Sentinel's failover client.
func TestRedisLayout2SentinelConformance(t *testing.T) {
	set := testsrv.StartSentinel(t)
	var n atomic.Int64
	admissiontest.Run(t, func(t *testing.T) admission.Store {
		c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: testsrv.SentinelMaster, SentinelAddrs: set.Addrs(), MaxRetries: 3})
		s, err := redisstore.New(c, layout2(redisstore.Options{KeyPrefix: fmt.Sprintf("l2sen%d", n.Add(1))}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}
