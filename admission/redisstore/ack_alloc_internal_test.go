//go:build !race

package redisstore

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestRedisReplicasAckOneMasterAllocations: on a Cluster, a pipeline whose commands all belong
// to one master costs sendAll no more allocations than sending it to that master directly
// (sendOn), which tells that it builds no fan-out and starts no goroutine. The race detector
// allocates on its own.
func TestRedisReplicasAckOneMasterAllocations(t *testing.T) {
	ctx := context.Background()
	a, c := newClusterAck(t, testsrv.StartCluster(t))
	master, err := c.MasterForKey(ctx, ackTestKeys[0])
	if err != nil {
		t.Fatal(err)
	}
	key := func(i int) string { return ackTestKeys[i] }
	acked, errs := make([]int64, len(ackTestKeys)), make([]error, len(ackTestKeys))
	measure := func(send func(cmds []redis.Cmder)) float64 {
		return testing.AllocsPerRun(200, func() {
			cmds := ackTestCmds(ctx)
			send(cmds)
			for i, cmd := range cmds {
				if cmd.Err() != nil || errs[i] != nil || acked[i] != 1 {
					t.Fatalf("command %d: %v, WAIT %v, %d acknowledged", i, cmd.Err(), errs[i], acked[i])
				}
			}
		})
	}
	direct := measure(func(cmds []redis.Cmder) { a.sendOn(ctx, master, cmds, nil, acked, errs) })
	all := measure(func(cmds []redis.Cmder) { a.sendAll(ctx, key, cmds, acked, errs) })
	// One of slack: the cluster client may reload its slot map (a background refresh) meanwhile.
	if all > direct+1 {
		t.Errorf("sendAll allocates %.1f a pipeline of one master, sendOn %.1f: want no fan-out", all, direct)
	}
	t.Logf("allocations a pipeline of one master: sendAll %.1f, sendOn %.1f", all, direct)
}
