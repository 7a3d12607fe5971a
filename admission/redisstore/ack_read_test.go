package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/internal/redisclient"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestRedisReplicasAckRead: with ReplicasAck the wins queue hands the order backend only wins a
// replica has. A win made while the replica is stopped (SIGSTOP) is not delivered by ReadGroup
// (new or pending entries) or Claim, blocking or not, within about the WAIT's timeout; once the
// replica runs again the same win is delivered. Without ReplicasAck it is delivered at once, as
// before. Single server, an activity split into buckets, and a Cluster.
func TestRedisReplicasAckRead(t *testing.T) {
	for _, buckets := range []int{0, 4} {
		t.Run(fmt.Sprintf("buckets%d", buckets), func(t *testing.T) {
			master := testsrv.StartRedis(t)
			replica := testsrv.StartReplica(t, master)
			newStore := func(ack int, timeout time.Duration) *redisstore.Store {
				s, _ := redisTestStore(t, master.Addr, redisstore.Options{ReplicasAck: ack, ReplicasAckTimeout: timeout}, nil)
				return s
			}
			checkAckedReads(t, "q1", buckets, replica, newStore(0, 0), newStore(1, 5*time.Second), newStore(1, 100*time.Millisecond))
		})
	}
	t.Run("cluster", func(t *testing.T) {
		cluster := testsrv.StartCluster(t)
		newStore := func(ack int, timeout time.Duration) *redisstore.Store {
			c := redisclient.New(&redis.UniversalOptions{Addrs: cluster.Addrs(), IsClusterMode: true, MaxRetries: 3})
			s, err := redisstore.New(c, redisstore.Options{ReplicasAck: ack, ReplicasAckTimeout: timeout})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		}
		replica := replicaOf(t, cluster.Nodes, cluster.MasterOf("seckill:{q1}:meta"))
		checkAckedReads(t, "q1", 0, replica, newStore(0, 0), newStore(1, 5*time.Second), newStore(1, 200*time.Millisecond))
	})
}

// checkAckedReads runs TestRedisReplicasAckRead on one topology: plain waits for nobody, patient
// and quick wait for one replica (paused: replica's process) with a long and a short timeout.
func checkAckedReads(t *testing.T, id string, buckets int, replica *testsrv.Redis, plain, patient, quick *redisstore.Store) {
	ctx := context.Background()
	a := redisOpen(id, 10, 1)
	a.Buckets = buckets
	redisDefine(t, plain, a)
	for _, s := range []*redisstore.Store{plain, patient} {
		if err := s.EnsureGroup(ctx, id, "g"); err != nil {
			t.Fatal(err)
		}
	}
	// The replica has alice's win (the patient store's admission waited for it): delivered.
	if d := redisAdmit(t, patient, id, "alice", "a"); d.Outcome != admission.Won {
		t.Fatalf("admit alice = %+v", d)
	}
	if ws, err := quick.ReadGroup(ctx, id, "g", "c1", 10, 0, false); err != nil || len(ws) != 1 || ws[0].User != "alice" {
		t.Fatalf("read with the replica up = %+v, %v; want alice's win", ws, err)
	}

	replica.Pause()
	resumed := false
	defer func() {
		if !resumed {
			replica.Resume()
		}
	}()
	// Bob's win is on the master only (a store that does not wait answered it).
	if d := redisAdmit(t, plain, id, "bob", "b"); d.Outcome != admission.Won {
		t.Fatalf("admit bob = %+v", d)
	}
	notReplicated := func(what string, ws []admission.Win, err error, took time.Duration) {
		t.Helper()
		if !errors.Is(err, admission.ErrNotReplicated) || len(ws) != 0 {
			t.Fatalf("%s with the replica stopped = %+v, %v; want no win and ErrNotReplicated", what, ws, err)
		}
		if took > 3*time.Second {
			t.Errorf("%s took %v, want about the WAIT's timeout", what, took)
		}
	}
	began := time.Now()
	ws, err := quick.ReadGroup(ctx, id, "g", "c1", 10, 0, false)
	notReplicated("read of new entries", ws, err, time.Since(began))
	began = time.Now()
	ws, err = quick.ReadGroup(ctx, id, "g", "c1", 10, 0, true)
	notReplicated("read of pending entries", ws, err, time.Since(began))
	began = time.Now()
	ws, err = quick.Claim(ctx, id, "g", "c2", 0, 10)
	notReplicated("claim", ws, err, time.Since(began))
	// A blocking read is not answered by a win made while it waits either.
	carol := make(chan error, 1)
	go func() {
		time.Sleep(50 * time.Millisecond)
		_, err := plain.Admit(ctx, admission.Request{Activity: id, User: "carol", Qty: 1, RequestID: "c"})
		carol <- err
	}()
	began = time.Now()
	ws, err = quick.ReadGroup(ctx, id, "g", "c3", 10, 400*time.Millisecond, false)
	notReplicated("blocking read", ws, err, time.Since(began))
	if err := <-carol; err != nil {
		t.Fatal(err)
	}
	// Without ReplicasAck the unreplicated win is delivered, as before.
	if d := redisAdmit(t, plain, id, "dave", "d"); d.Outcome != admission.Won {
		t.Fatalf("admit dave = %+v", d)
	}
	if ws, err := plain.ReadGroup(ctx, id, "g", "c4", 10, 0, false); err != nil || len(ws) != 1 || ws[0].User != "dave" {
		t.Fatalf("read without replicas_ack = %+v, %v; want dave's unreplicated win", ws, err)
	}

	replica.Resume()
	resumed = true
	// The entries the refused reads took stay pending: delivered once the replica has them.
	got := map[string]bool{}
	for _, c := range []string{"c1", "c2", "c3"} {
		ws, err := patient.ReadGroup(ctx, id, "g", c, 10, 0, true)
		if err != nil {
			t.Fatalf("pending read of %s with the replica back: %v", c, err)
		}
		for _, w := range ws {
			got[w.User] = true
		}
	}
	if !got["bob"] || !got["carol"] {
		t.Fatalf("pending wins delivered with the replica back: %v, want bob and carol", got)
	}
}
