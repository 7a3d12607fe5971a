package redisstore_test

import (
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// BenchmarkRedisAdmitReplicasAck measures what Options.ReplicasAck costs on the won path
// of group admission at 64 concurrent callers: a private master with one private replica on this
// machine, admissions with and without a WAIT for the replica behind every script call. Both
// modes run against the same pair, so the master feeds the replica in both; the ratio of their
// admits/s is the price of the wait. Run it with -count to interleave the modes:
//
//	go test -run '^$' -bench RedisAdmitReplicasAck -benchtime 3s -count 5 ./admission/
func BenchmarkRedisAdmitReplicasAck(b *testing.B) {
	master := testsrv.StartRedis(b)
	testsrv.StartReplica(b, master)
	for _, m := range []struct {
		name string
		opts redisstore.Options
	}{
		{"won_grouped", redisstore.Options{}},
		{"won_grouped_replicas_ack_1", redisstore.Options{ReplicasAck: 1, ReplicasAckTimeout: 5 * time.Second}},
	} {
		b.Run(m.name, func(b *testing.B) {
			redisBenchAdmit(b, master.Addr, 0, m.opts, 1<<50, admission.Won)
		})
	}
}
