package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestRedisReplicasAckClusterSpan: on a private 3+3 Cluster, concurrent buys of three
// activities, one on each master, share pipelines that span the masters. Each master's share
// carries its own WAIT: every master counts exactly as many WAITs as script calls (one activity
// each), and every win is on its own master's replica when it is answered. With one master's
// replica stopped, that master's buys answer ErrNotReplicated (the wins held on the master) in
// the same pipelines as the other masters' buys, which win, confirmed by their replicas; once
// the replica is back, the retries replay the held wins.
func TestRedisReplicasAckClusterSpan(t *testing.T) {
	ctx := context.Background()
	cluster := testsrv.StartCluster(t)
	type store struct {
		*redisstore.Store
		widest func() int64
	}
	newStore := func(timeout time.Duration) store {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), MaxRetries: 3})
		s, err := redisstore.New(c, redisstore.Options{ReplicasAck: 1, ReplicasAckTimeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		_, widest := s.CountAdmitPipelines()
		return store{s, widest.Load}
	}
	// A timeout far above a replica's acknowledgement on a loaded machine where the replica runs.
	patient, quick := newStore(5*time.Second), newStore(200*time.Millisecond)

	// One activity on each master, with a client of the master and one of its replica.
	type side struct {
		activity         string
		master, replica  *testsrv.Redis
		onMaster, onRepl *redis.Client
	}
	var sides []*side
	seen := map[*testsrv.Redis]bool{}
	for i := 0; len(sides) < 3; i++ {
		if i == 1000 {
			t.Fatal("no three activities on three masters")
		}
		id := fmt.Sprintf("span%d", i)
		m := cluster.MasterOf("seckill:{" + id + "}:meta")
		if seen[m] {
			continue
		}
		seen[m] = true
		r := replicaOf(t, cluster.Nodes, m)
		sd := &side{activity: id, master: m, replica: r, onMaster: redis.NewClient(&redis.Options{Addr: m.Addr}),
			// A Cluster replica serves reads only on a READONLY connection.
			onRepl: redis.NewClient(&redis.Options{Addr: r.Addr, OnConnect: func(ctx context.Context, cn *redis.Conn) error {
				return cn.ReadOnly(ctx).Err()
			}})}
		t.Cleanup(func() { _ = sd.onMaster.Close(); _ = sd.onRepl.Close() })
		sides = append(sides, sd)
		redisDefine(t, patient, redisOpen(id, 1000, 1))
		redisAdmit(t, patient, id, "warm-up", "w") // loads the script on this master
		redisAdmit(t, quick, id, "warm-up", "w")   // a replay
	}
	counts := func() (evals, waits []int64) {
		for _, sd := range sides {
			evals, waits = append(evals, redisEvalCalls(t, sd.onMaster)), append(waits, redisCmdCalls(t, sd.onMaster, "wait"))
		}
		return evals, waits
	}

	// buy sends users concurrently, user u to sides[u%3], and returns each one's answer.
	buy := func(s store, prefix string, users int) ([]admission.Decision, []error) {
		ds, errs := make([]admission.Decision, users), make([]error, users)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for u := range users {
			wg.Go(func() {
				<-start
				user := fmt.Sprintf("%s%d", prefix, u)
				ds[u], errs[u] = s.Admit(ctx, admission.Request{Activity: sides[u%3].activity, User: user, Qty: 1, RequestID: user})
				if errs[u] == nil && ds[u].Outcome == admission.Won {
					// Answered once its master's replica acknowledged: the replica has it now.
					if n := redisHeld(t, sides[u%3].onRepl, sides[u%3].activity, user); n != 1 {
						t.Errorf("%s won on %s, but its master's replica %s holds %d", user, sides[u%3].master.Addr, sides[u%3].replica.Addr, n)
					}
				}
			})
		}
		close(start)
		wg.Wait()
		return ds, errs
	}

	const buyers = 300
	evals0, waits0 := counts()
	storeWaits0, _ := patient.ReplicaAcks()
	ds, errs := buy(patient, "u", buyers)
	ids := map[string]bool{} // activity and reservation id: an activity's ids are its stream's
	for u := range buyers {
		id := sides[u%3].activity + " " + ds[u].ReservationID
		if errs[u] != nil || ds[u].Outcome != admission.Won || ds[u].Replayed || ds[u].ReservationID == "" || ids[id] {
			t.Errorf("buyer u%d: %+v, %v; want a win of its own", u, ds[u], errs[u])
		}
		ids[id] = true
	}
	evals1, waits1 := counts()
	storeWaits1, _ := patient.ReplicaAcks()
	var allWaits int64
	for i, sd := range sides {
		calls, waits := evals1[i]-evals0[i], waits1[i]-waits0[i]
		allWaits += waits
		t.Logf("master %s (%s): %d script calls, %d WAITs", sd.master.Addr, sd.activity, calls, waits)
		if calls == 0 || waits != calls {
			t.Errorf("master %s: %d WAITs for %d script calls, want one behind each (its share of a pipeline)", sd.master.Addr, waits, calls)
		}
		snap, err := patient.Activity(ctx, sd.activity)
		if want := int64(buyers/3 + 1); err != nil || snap.Remaining != 1000-want || snap.Buyers != want {
			t.Errorf("%s after the buys: %+v, %v; want %d buyers (and the warm-up)", sd.activity, snap, err, want)
		}
	}
	if int64(storeWaits1-storeWaits0) != allWaits {
		t.Errorf("the store counted %d WAITs, the masters %d", storeWaits1-storeWaits0, allWaits)
	}
	if w := patient.widest(); w < 2 {
		t.Errorf("no pipeline spanned masters (widest %d)", w)
	}

	// The first master's replica stops: its buys are not confirmed, the others' are.
	stopped := sides[0]
	stopped.replica.Pause()
	resumed := false
	defer func() {
		if !resumed {
			stopped.replica.Resume()
		}
	}()
	const more = 60
	ds, errs = buy(quick, "v", more)
	stopped.replica.Resume()
	resumed = true
	held := map[string]string{}
	for u := range more {
		user := fmt.Sprintf("v%d", u)
		if u%3 != 0 {
			if errs[u] != nil || ds[u].Outcome != admission.Won || ds[u].Replayed {
				t.Errorf("%s on %s, whose replica runs: %+v, %v; want a win", user, sides[u%3].activity, ds[u], errs[u])
			}
			continue
		}
		var re *admission.ReplicationError
		if !errors.As(errs[u], &re) || re.Acked != 0 || re.ReservationID == "" {
			t.Errorf("%s on %s, whose replica is stopped: %+v, %v; want a ReplicationError with 0 acknowledged", user, stopped.activity, ds[u], errs[u])
			continue
		}
		if n := redisHeld(t, stopped.onMaster, stopped.activity, user); n != 1 {
			t.Errorf("%s: the master holds %d after the unconfirmed win, want 1", user, n)
		}
		held[user] = re.ReservationID
	}
	if w := quick.widest(); w < 2 {
		t.Errorf("with the replica stopped, no pipeline spanned masters (widest %d)", w)
	}
	if err := stopped.replica.WaitLinkUp(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	for user, id := range held {
		d, err := patient.Admit(ctx, admission.Request{Activity: stopped.activity, User: user, Qty: 1, RequestID: user})
		if err != nil || !d.Replayed || d.ReservationID != id {
			t.Errorf("%s's retry with the replica back = %+v, %v; want the replay of %s", user, d, err, id)
		}
		if n := redisHeld(t, stopped.onRepl, stopped.activity, user); n != 1 {
			t.Errorf("%s: the replica holds %d after the confirmed replay, want 1", user, n)
		}
	}
}
