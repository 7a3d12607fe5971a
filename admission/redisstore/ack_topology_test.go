package redisstore_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestRedisReplicasAckCluster: on a private Redis Cluster (3 masters, 1 replica each) the WAIT
// goes to the master of the activity's slot, on the script's connection: a win is confirmed, the
// WAITs are counted on that master and on no other, and with that master's replica stopped the
// win is answered ErrNotReplicated; the retry replays it once the replica is back.
func TestRedisReplicasAckCluster(t *testing.T) {
	cluster := testsrv.StartCluster(t)
	newStore := func(timeout time.Duration) *redisstore.Store {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), MaxRetries: 3})
		s, err := redisstore.New(c, redisstore.Options{ReplicasAck: 1, ReplicasAckTimeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	patient, quick := newStore(5*time.Second), newStore(200*time.Millisecond)
	const key = "seckill:{c1}:meta"
	redisDefine(t, patient, redisOpen("c1", 10, 1))
	master := cluster.MasterOf(key)
	replica := replicaOf(t, cluster.Nodes, master)
	waits := func() map[string]int64 {
		m := map[string]int64{}
		for _, n := range cluster.Nodes[:3] {
			c := n.Client()
			m[n.Addr] = redisCmdCalls(t, c, "wait")
			_ = c.Close()
		}
		return m
	}
	before := waits()
	if d := redisAdmit(t, patient, "c1", "alice", "a"); d.Outcome != admission.Won {
		t.Fatalf("admit on the cluster = %+v", d)
	}
	for addr, n := range waits() {
		switch d := n - before[addr]; {
		case addr == master.Addr && d < 1:
			t.Errorf("master of the slot %s counted %d WAITs, want at least 1", addr, d)
		case addr != master.Addr && d != 0:
			t.Errorf("master %s, which does not hold the activity, counted %d WAITs", addr, d)
		}
	}

	replica.Pause()
	_, err := quick.Admit(context.Background(), admission.Request{Activity: "c1", User: "bob", Qty: 1, RequestID: "b"})
	replica.Resume()
	var re *admission.ReplicationError
	if !errors.As(err, &re) || re.Acked != 0 {
		t.Fatalf("admit with the slot's replica stopped: %v, want a ReplicationError with 0 acknowledged", err)
	}
	if err := replica.WaitLinkUp(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	d, err := patient.Admit(context.Background(), admission.Request{Activity: "c1", User: "bob", Qty: 1, RequestID: "b"})
	if err != nil || !d.Replayed || d.ReservationID != re.ReservationID {
		t.Fatalf("retry with the replica back = %+v, %v; want the replay of %s", d, err, re.ReservationID)
	}
}

// TestRedisReplicasAckSentinel: through Sentinel's failover client (a master and one replica)
// a win is confirmed by the replica, and with the replica stopped answered ErrNotReplicated.
func TestRedisReplicasAckSentinel(t *testing.T) {
	set := testsrv.StartSentinel(t)
	newStore := func(timeout time.Duration) *redisstore.Store {
		c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: testsrv.SentinelMaster, SentinelAddrs: set.Addrs(), MaxRetries: 3})
		s, err := redisstore.New(c, redisstore.Options{ReplicasAck: 1, ReplicasAckTimeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	patient, quick := newStore(5*time.Second), newStore(200*time.Millisecond)
	redisDefine(t, patient, redisOpen("s1", 10, 1))
	if d := redisAdmit(t, patient, "s1", "alice", "a"); d.Outcome != admission.Won {
		t.Fatalf("admit through sentinel = %+v", d)
	}
	replica := replicaOf(t, set.Servers, set.Master())
	replica.Pause()
	_, err := quick.Admit(context.Background(), admission.Request{Activity: "s1", User: "bob", Qty: 1, RequestID: "b"})
	replica.Resume()
	if !errors.Is(err, admission.ErrNotReplicated) {
		t.Fatalf("admit with the replica stopped: %v, want ErrNotReplicated", err)
	}
}

// replicaOf returns the server among nodes that replicates master.
func replicaOf(t *testing.T, nodes []*testsrv.Redis, master *testsrv.Redis) *testsrv.Redis {
	t.Helper()
	_, port, _ := net.SplitHostPort(master.Addr)
	for _, n := range nodes {
		if info, err := n.Info("replication"); err == nil && info["role"] == "slave" && info["master_port"] == port {
			return n
		}
	}
	t.Fatalf("no replica of %s", master.Addr)
	return nil
}
