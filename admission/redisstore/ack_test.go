package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/admissiontest"
	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestRedisReplicasAckConformance: waiting for a replica changes when an answer is given, not
// what it is (a private master with one private replica, both modes).
func TestRedisReplicasAckConformance(t *testing.T) {
	master := testsrv.StartRedis(t)
	testsrv.StartReplica(t, master)
	var n atomic.Int64
	// A timeout far above a replica's acknowledgement on a loaded machine: no test may fail for
	// a slow one.
	for _, v := range []redisstore.Options{
		{ReplicasAck: 1, ReplicasAckTimeout: 5 * time.Second},
		{ReplicasAck: 1, ReplicasAckTimeout: 5 * time.Second, AdmitBatch: 1},
	} {
		t.Run(fmt.Sprintf("batch%d", v.AdmitBatch), func(t *testing.T) {
			admissiontest.Run(t, func(t *testing.T) admission.Store {
				opts := v
				opts.KeyPrefix = fmt.Sprintf("ack%d", n.Add(1))
				s, _ := redisTestStore(t, master.Addr, opts, nil)
				return s
			})
		})
	}
}

// TestRedisReplicasAck: with the replica healthy a win is on the replica when it is answered;
// with the replica stopped the win is answered ErrNotReplicated within about the timeout, it IS
// on the master, a retry with the same request id is refused the same way until the replica is
// back, and then replays the first win. Releases likewise.
func TestRedisReplicasAck(t *testing.T) {
	for _, v := range []redisstore.Options{{}, {AdmitBatch: 1}} {
		t.Run(fmt.Sprintf("batch%d", v.AdmitBatch), func(t *testing.T) { testRedisReplicasAck(t, v) })
	}
}

func testRedisReplicasAck(t *testing.T, v redisstore.Options) {
	ctx := context.Background()
	master := testsrv.StartRedis(t)
	replica := testsrv.StartReplica(t, master)
	// Two stores on the master: patient with a 5 s timeout, so that a slow acknowledgement on a
	// loaded machine cannot fail the test where the replica runs, and quick with 100 ms where it
	// is stopped.
	v.ReplicasAck, v.ReplicasAckTimeout = 1, 5*time.Second
	s, raw := redisTestStore(t, master.Addr, v, nil)
	v.ReplicasAckTimeout = 100 * time.Millisecond
	quick, _ := redisTestStore(t, master.Addr, v, nil)
	onReplica := redis.NewClient(&redis.Options{Addr: replica.Addr})
	t.Cleanup(func() { _ = onReplica.Close() })
	redisDefine(t, s, redisOpen("r1", 10, 1))

	won := redisAdmit(t, s, "r1", "alice", "a1")
	if won.Outcome != admission.Won {
		t.Fatalf("admit with the replica up = %+v", won)
	}
	// WAIT returned 1: the replica has the win already, no polling needed.
	if n := redisHeld(t, onReplica, "r1", "alice"); n != 1 {
		t.Fatalf("replica: alice holds = %d right after the acknowledged win, want 1", n)
	}
	if waits, short := s.ReplicaAcks(); waits == 0 || short != 0 {
		t.Fatalf("ReplicaAcks = %d waits, %d shortfalls; want some waits, none short", waits, short)
	}
	// A refusal is answered as usual (it wrote nothing, so its WAIT's count does not matter).
	if d := redisAdmit(t, s, "r1", "alice", "a2"); d.Outcome != admission.LimitReached {
		t.Fatalf("second request of alice = %+v, want limit_reached", d)
	}

	replica.Pause()
	_, shortBefore := quick.ReplicaAcks()
	began := time.Now()
	_, err := quick.Admit(ctx, admission.Request{Activity: "r1", User: "bob", Qty: 1, RequestID: "b1"})
	took := time.Since(began)
	var re *admission.ReplicationError
	if !errors.Is(err, admission.ErrNotReplicated) || !errors.As(err, &re) || re.Acked != 0 || re.Wanted != 1 || re.ReservationID == "" {
		t.Fatalf("admit with the replica stopped: %v, want a ReplicationError 0 of 1 with the reservation", err)
	}
	if took < 90*time.Millisecond || took > 3*time.Second {
		t.Errorf("the refused admission took %v, want about the 100ms timeout", took)
	}
	if _, short := quick.ReplicaAcks(); short != shortBefore+1 {
		t.Errorf("shortfalls %d, want %d", short, shortBefore+1)
	}
	// The master holds the win: the answer was "unknown", not "no".
	if n := redisHeld(t, raw, "r1", "bob"); n != 1 {
		t.Fatalf("master: bob holds = %d after the unconfirmed win, want 1", n)
	}
	if n := len(redisStreamWins(t, raw, "r1")); n != 2 {
		t.Fatalf("master's stream has %d wins, want 2 (alice, bob)", n)
	}
	// A retry of the same request is a replay; it is not confirmed either while the replica is
	// stopped, whichever pooled connection carries it.
	if _, err := quick.Admit(ctx, admission.Request{Activity: "r1", User: "bob", Qty: 1, RequestID: "b1"}); !errors.Is(err, admission.ErrNotReplicated) {
		t.Fatalf("retry with the replica stopped: %v, want ErrNotReplicated", err)
	}
	// A refusal is still answered (after the WAIT's timeout).
	if d := redisAdmit(t, quick, "r1", "alice", "a3"); d.Outcome != admission.LimitReached {
		t.Fatalf("refusal with the replica stopped = %+v, want limit_reached", d)
	}
	// A release is not confirmed either.
	if _, err := quick.Release(ctx, "r1", won.ReservationID); !errors.Is(err, admission.ErrNotReplicated) {
		t.Fatalf("release with the replica stopped: %v, want ErrNotReplicated", err)
	}

	replica.Resume()
	d, err := s.Admit(ctx, admission.Request{Activity: "r1", User: "bob", Qty: 1, RequestID: "b1"})
	if err != nil || d.Outcome != admission.Won || !d.Replayed || d.ReservationID != re.ReservationID {
		t.Fatalf("retry with the replica back = %+v, %v; want the replayed win %s", d, err, re.ReservationID)
	}
	if n := redisHeld(t, onReplica, "r1", "bob"); n != 1 {
		t.Fatalf("replica: bob holds = %d after the confirmed replay, want 1", n)
	}
	// The release was made on the master; its retry answers false (released before) once the
	// replicas confirm, and the replica has it.
	if ok, err := s.Release(ctx, "r1", won.ReservationID); ok || err != nil {
		t.Fatalf("release retry = %v, %v; want false (released by the first call), nil", ok, err)
	}
	if n := redisHeld(t, onReplica, "r1", "alice"); n != 0 {
		t.Fatalf("replica: alice holds = %d after the confirmed release, want 0", n)
	}
	if n := redisInt(t, onReplica, "seckill:{r1}:stock"); n != 9 {
		t.Fatalf("replica stock = %d, want 9 (10, two wins, one release)", n)
	}
}

// TestRedisReplayWrites: a replayed win and a repeated release move the master's replication
// offset (they write their stored answer again: admit.lua the user's :users field, release.lua the
// release token), so that a WAIT behind a retry on any connection covers the first write.
func TestRedisReplayWrites(t *testing.T) {
	ctx := context.Background()
	srv := testsrv.StartRedis(t)
	// The offset moves only once a replica is attached (the master then keeps a backlog).
	testsrv.StartReplica(t, srv)
	s, _ := redisTestStore(t, srv.Addr, redisstore.Options{AdmitBatch: 1}, nil)
	redisDefine(t, s, redisOpen("rw", 10, 1))
	won := redisAdmit(t, s, "rw", "alice", "a1")
	offset := func() int64 {
		t.Helper()
		info, err := srv.Info("replication")
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		fmt.Sscan(info["master_repl_offset"], &n)
		return n
	}
	before := offset()
	if d := redisAdmit(t, s, "rw", "alice", "a1"); !d.Replayed {
		t.Fatalf("retry = %+v, want a replay", d)
	}
	afterReplay := offset()
	if afterReplay <= before {
		t.Fatalf("replication offset %d → %d over a replay, want it to move", before, afterReplay)
	}
	if d := redisAdmit(t, s, "rw", "bob", "b1"); d.Outcome != admission.Won {
		t.Fatalf("bob = %+v", d)
	}
	if ok, err := s.Release(ctx, "rw", won.ReservationID); !ok || err != nil {
		t.Fatalf("release = %v, %v", ok, err)
	}
	before = offset()
	if ok, err := s.Release(ctx, "rw", won.ReservationID); ok || err != nil {
		t.Fatalf("repeated release = %v, %v; want false", ok, err)
	}
	if after := offset(); after <= before {
		t.Fatalf("replication offset %d → %d over a repeated release, want it to move", before, after)
	}
}

// TestRedisReplicasAckOneWaitPerPipeline: concurrent buys share script calls, and each pipeline
// of them sends exactly one WAIT, on the master (INFO commandstats), however many activities'
// script calls it carries: with two activities, a pipeline with both calls has one WAIT behind
// them.
func TestRedisReplicasAckOneWaitPerPipeline(t *testing.T) {
	for _, activities := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d activities", activities), func(t *testing.T) {
			testRedisReplicasAckOneWaitPerPipeline(t, activities)
		})
	}
}

func testRedisReplicasAckOneWaitPerPipeline(t *testing.T, activities int) {
	ctx := context.Background()
	master := testsrv.StartRedis(t)
	testsrv.StartReplica(t, master)
	s, raw := redisTestStore(t, master.Addr, redisstore.Options{ReplicasAck: 1, ReplicasAckTimeout: 5 * time.Second}, func(o *redis.Options) { o.PoolSize = 8 })
	pipelines, widest := s.CountAdmitPipelines()
	for a := range activities {
		act := fmt.Sprintf("w%d", a)
		redisDefine(t, s, redisOpen(act, 1000, 1))
		redisAdmit(t, s, act, "warm-up", "r") // loads the script
	}
	evalsBefore, waitsBefore := redisEvalCalls(t, raw), redisCmdCalls(t, raw, "wait")
	storeWaitsBefore, _ := s.ReplicaAcks()
	pipelinesBefore := pipelines.Load()
	widest.Store(0)

	const buyers = 400
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		wins  atomic.Int64
	)
	for u := range buyers {
		wg.Go(func() {
			<-start
			act := fmt.Sprintf("w%d", u%activities)
			d, err := s.Admit(ctx, admission.Request{Activity: act, User: fmt.Sprintf("u%d", u), Qty: 1, RequestID: "r"})
			if err != nil {
				t.Errorf("admit %s u%d: %v", act, u, err)
				return
			}
			if d.Outcome == admission.Won {
				wins.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	if wins.Load() != buyers {
		t.Fatalf("%d wins, want %d", wins.Load(), buyers)
	}
	evals, waits := redisEvalCalls(t, raw)-evalsBefore, redisCmdCalls(t, raw, "wait")-waitsBefore
	storeWaits, _ := s.ReplicaAcks()
	pipes := pipelines.Load() - pipelinesBefore
	t.Logf("%d buys of %d activities: %d script calls in %d pipelines (the widest with %d activities), %d WAITs", buyers, activities, evals, pipes, widest.Load(), waits)
	if evals >= buyers {
		t.Errorf("%d script calls for %d concurrent buys: no grouping happened", evals, buyers)
	}
	if waits != pipes || int64(storeWaits-storeWaitsBefore) != waits {
		t.Errorf("%d WAITs on the server (%d counted by the store) for %d pipelines, want one per pipeline", waits, storeWaits-storeWaitsBefore, pipes)
	}
	if activities > 1 && (widest.Load() < 2 || evals <= waits) {
		t.Errorf("no pipeline carried two activities' script calls (widest %d; %d calls, %d WAITs)", widest.Load(), evals, waits)
	}
}

// TestRedisReplicasAckOptions: bad values are refused with ErrBadInput, and a Ring (which has no
// single master per key to WAIT on) too.
func TestRedisReplicasAckOptions(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = c.Close() })
	for _, o := range []redisstore.Options{
		{ReplicasAck: -1},
		{ReplicasAck: redisstore.MaxReplicasAck + 1},
		{ReplicasAck: 1, ReplicasAckTimeout: time.Microsecond},
		{ReplicasAck: 1, ReplicasAckTimeout: redisstore.MaxReplicasAckTimeout + time.Second},
		{ReplicasAckTimeout: time.Second},
	} {
		if _, err := redisstore.New(c, o); !errors.Is(err, admission.ErrBadInput) {
			t.Errorf("New(%+v): %v, want ErrBadInput", o, err)
		}
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	t.Cleanup(func() { _ = ring.Close() })
	if _, err := redisstore.New(ring, redisstore.Options{ReplicasAck: 1}); !errors.Is(err, admission.ErrBadInput) || !strings.Contains(err.Error(), "Ring") {
		t.Errorf("New(ring, replicas ack): %v, want ErrBadInput naming the Ring", err)
	}
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { _ = cluster.Close() })
	if _, err := redisstore.New(cluster, redisstore.Options{ReplicasAck: 2}); err != nil {
		t.Errorf("New(cluster, replicas ack): %v", err)
	}
}

// redisCmdCalls reads one command's call count from INFO commandstats.
func redisCmdCalls(t testing.TB, raw *redis.Client, name string) int64 {
	t.Helper()
	info, err := raw.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "cmdstat_"+name+":calls="); ok {
			var n int64
			fmt.Sscan(strings.SplitN(v, ",", 2)[0], &n)
			return n
		}
	}
	return 0
}
