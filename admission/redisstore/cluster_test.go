package redisstore_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/admissiontest"
	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
	"github.com/caddy-seckill/caddy-seckill/waitroom/linetest"
)

// TestRedisClusterConformance runs the conformance suite on a private Redis Cluster of three
// masters and three replicas, through a ClusterClient: each activity's keys share one slot. The
// waiting room's line (linetest) runs on the same cluster.
func TestRedisClusterConformance(t *testing.T) {
	cluster := testsrv.StartCluster(t)
	var n atomic.Int64
	open := func(t *testing.T) *redisstore.Store {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), MaxRetries: 3})
		s, err := redisstore.New(c, redisstore.Options{KeyPrefix: fmt.Sprintf("cc%d", n.Add(1))})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	admissiontest.Run(t, func(t *testing.T) admission.Store { return open(t) })
	t.Run("Line", func(t *testing.T) {
		linetest.Run(t, func(t *testing.T) linetest.Store { return open(t) })
	})
}

// TestRedisSentinelConformance runs it, and the line's, through Sentinel's failover client (a
// private master, its replica and three sentinels).
func TestRedisSentinelConformance(t *testing.T) {
	set := testsrv.StartSentinel(t)
	var n atomic.Int64
	open := func(t *testing.T) *redisstore.Store {
		c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: testsrv.SentinelMaster, SentinelAddrs: set.Addrs(), MaxRetries: 3})
		s, err := redisstore.New(c, redisstore.Options{KeyPrefix: fmt.Sprintf("sen%d", n.Add(1))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	admissiontest.Run(t, func(t *testing.T) admission.Store { return open(t) })
	t.Run("Line", func(t *testing.T) {
		linetest.Run(t, func(t *testing.T) linetest.Store { return open(t) })
	})
}
