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
)

// TestRedisClusterConformance runs the conformance suite on a private Redis Cluster of three
// masters and three replicas, through a ClusterClient: each activity's keys share one slot.
func TestRedisClusterConformance(t *testing.T) {
	cluster := testsrv.StartCluster(t)
	var n atomic.Int64
	admissiontest.Run(t, func(t *testing.T) admission.Store {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), MaxRetries: 3})
		s, err := redisstore.New(c, redisstore.Options{KeyPrefix: fmt.Sprintf("cc%d", n.Add(1))})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestRedisSentinelConformance runs it through Sentinel's failover client (a private master, its
// replica and three sentinels).
func TestRedisSentinelConformance(t *testing.T) {
	set := testsrv.StartSentinel(t)
	var n atomic.Int64
	admissiontest.Run(t, func(t *testing.T) admission.Store {
		c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: testsrv.SentinelMaster, SentinelAddrs: set.Addrs(), MaxRetries: 3})
		s, err := redisstore.New(c, redisstore.Options{KeyPrefix: fmt.Sprintf("sen%d", n.Add(1))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}
