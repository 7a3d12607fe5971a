package redisstore

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// ackTestKeys are three keys of one slot, as a pipeline of one activity's calls writes.
var ackTestKeys = []string{"t:{x}:a", "t:{x}:b", "t:{x}:c"}

// ackTestCmds returns a write of each of ackTestKeys.
func ackTestCmds(ctx context.Context) []redis.Cmder {
	cmds := make([]redis.Cmder, len(ackTestKeys))
	for i, k := range ackTestKeys {
		cmds[i] = redis.NewIntCmd(ctx, "incr", k)
	}
	return cmds
}

// newClusterAck returns a replicasAck of one replica on a Cluster client of cluster.
func newClusterAck(t *testing.T, cluster *testsrv.Cluster) (*replicasAck, *redis.ClusterClient) {
	t.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), MaxRetries: 3})
	t.Cleanup(func() { _ = c.Close() })
	a, err := newReplicasAck(c, 1, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return a, c
}

// TestRedisReplicasAckReloadOnce: when a master redirects every command of a pipeline (MOVED,
// here a master that does not own the slot), the cluster client's slot map is reloaded once for
// the pipeline, not once per command, and no command counts as acknowledged.
func TestRedisReplicasAckReloadOnce(t *testing.T) {
	ctx := context.Background()
	cluster := testsrv.StartCluster(t)
	a, c := newClusterAck(t, cluster)
	var reloads atomic.Int64
	a.reload = func(ctx context.Context) {
		reloads.Add(1)
		c.ReloadState(ctx)
	}
	owner := cluster.MasterOf(ackTestKeys[0])
	var other *redis.Client
	for _, n := range cluster.Nodes[:3] {
		if n != owner {
			other = n.Client()
			break
		}
	}
	t.Cleanup(func() { _ = other.Close() })

	cmds := ackTestCmds(ctx)
	acked, errs := make([]int64, len(cmds)), make([]error, len(cmds))
	a.sendOn(ctx, other, cmds, nil, acked, errs)
	for i, cmd := range cmds {
		if err := cmd.Err(); !redis.HasErrorPrefix(err, "MOVED") || acked[i] != 0 {
			t.Errorf("command %d on a master without its slot: %v, %d acknowledged; want MOVED, 0", i, err, acked[i])
		}
	}
	if n := reloads.Load(); n != 1 {
		t.Errorf("%d slot map reloads for one redirected pipeline of %d commands, want 1", n, len(cmds))
	}
}
