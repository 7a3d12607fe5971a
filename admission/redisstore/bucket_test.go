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
	"github.com/sony/gobreaker/v2"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/admissiontest"
	"github.com/caddy-seckill/caddy-seckill/admission/localstore"
	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestRedisBuckets runs the split-activity cases on one server, with the rebalancer off (pulls
// alone must keep every promise) and on.
func TestRedisBuckets(t *testing.T) {
	srv := testsrv.StartRedis(t)
	var n atomic.Int64
	redisBucketVariants(t, func(t *testing.T, opts redisstore.Options) {
		admissiontest.RunBuckets(t, func(t *testing.T) admission.Store {
			opts.KeyPrefix = fmt.Sprintf("bk%d", n.Add(1))
			s, _ := redisTestStore(t, srv.Addr, opts, nil)
			return s
		})
	})
}

// redisBucketVariants runs a split-activity test with the rebalancer off (pulls alone must keep
// every promise), on, and with group admission off.
func redisBucketVariants(t *testing.T, test func(t *testing.T, opts redisstore.Options)) {
	for _, v := range []struct {
		name string
		opts redisstore.Options
	}{
		{"pulls_only", redisstore.Options{RebalanceInterval: -1}},
		{"rebalancer", redisstore.Options{}},
		{"single_calls", redisstore.Options{AdmitBatch: 1, RebalanceInterval: -1}},
	} {
		t.Run(v.name, func(t *testing.T) { test(t, v.opts) })
	}
}

// TestRedisBucketsCluster runs them on a Cluster of three masters and three replicas, where the
// buckets are on different shards.
func TestRedisBucketsCluster(t *testing.T) {
	cluster := testsrv.StartCluster(t)
	var n atomic.Int64
	admissiontest.RunBuckets(t, func(t *testing.T) admission.Store {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), MaxRetries: 3})
		s, err := redisstore.New(c, redisstore.Options{KeyPrefix: fmt.Sprintf("bk%d", n.Add(1))})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestBucketsNeedRedis: one node has no shards to spread a split activity over, so the memory
// and local stores refuse it; every store refuses a count out of range or above the stock.
func TestBucketsNeedRedis(t *testing.T) {
	local, err := localstore.Open(t.TempDir(), localstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = local.Close() })
	mem := localstore.NewMemory(localstore.MemoryOptions{})
	t.Cleanup(func() { _ = mem.Close() })
	ctx := context.Background()
	for _, s := range []admission.Store{mem, local} {
		a := redisOpen("split", 10, 1)
		a.Buckets = 2
		_, err := s.Define(ctx, a, false)
		if !errors.Is(err, admission.ErrBadInput) || !strings.Contains(err.Error(), "buckets needs store redis") {
			t.Errorf("%T: define with buckets 2: %v", s, err)
		}
		a.Buckets = 1 // one bucket is no split
		if got, err := s.Define(ctx, a, false); err != nil || got.Buckets != 0 {
			t.Errorf("%T: define with buckets 1: %+v, %v", s, got, err)
		}
	}
	srv := testsrv.StartRedis(t)
	rs, _ := redisTestStore(t, srv.Addr, redisstore.Options{}, nil)
	for _, n := range []int{-1, admission.MaxBuckets + 1, 11} {
		a := redisOpen("bad", 10, 1)
		a.Buckets = n
		if _, err := rs.Define(ctx, a, false); !errors.Is(err, admission.ErrBadInput) {
			t.Errorf("buckets %d of a stock of 10: %v; want ErrBadInput", n, err)
		}
	}
}

// TestRedisBucketsStaleCount: a store that cached an activity's bucket count follows another
// store's deletion and redefinition with another count at its next call.
func TestRedisBucketsStaleCount(t *testing.T) {
	srv := testsrv.StartRedis(t)
	ctx := context.Background()
	a, _ := redisTestStore(t, srv.Addr, redisstore.Options{RebalanceInterval: -1}, nil)
	b, _ := redisTestStore(t, srv.Addr, redisstore.Options{RebalanceInterval: -1}, nil)
	act := redisOpen("stale", 40, 1)
	for round, n := range []int{0, 4, 2, 0} {
		if round > 0 {
			if err := a.Delete(ctx, act.ID, true); err != nil {
				t.Fatal(err)
			}
		}
		act.Buckets = n
		redisDefine(t, a, act)
		for i := range 3 {
			u := fmt.Sprintf("r%du%d", round, i)
			d, err := b.Admit(ctx, admission.Request{Activity: act.ID, User: u, Qty: 1, RequestID: "x"})
			if err != nil || d.Outcome != admission.Won {
				t.Fatalf("round %d (%d buckets): admit on the other store: %+v, %v", round, n, d, err)
			}
			if ok, err := b.Release(ctx, act.ID, d.ReservationID); err != nil || !ok {
				t.Fatalf("round %d: release %s: %v, %v", round, d.ReservationID, ok, err)
			}
		}
		snap, err := b.Activity(ctx, act.ID)
		if err != nil || snap.Buckets != n || snap.Remaining != 40 {
			t.Errorf("round %d: snapshot %+v, %v", round, snap, err)
		}
	}
}

// TestRedisBucketsHalfTransferNotSoldOut: an item a transfer has taken and not yet given is in no
// bucket; a buyer whose home bucket is empty must win it (the pull completes the transfer), not
// be told sold_out while it is in flight.
func TestRedisBucketsHalfTransferNotSoldOut(t *testing.T) {
	srv := testsrv.StartRedis(t)
	s, _ := redisTestStore(t, srv.Addr, redisstore.Options{RebalanceInterval: -1}, nil)
	ctx := context.Background()
	a := admission.Activity{ID: "half", Stock: 2, Limit: 1, Buckets: 2,
		Start: time.Now().Add(-time.Minute), End: time.Now().Add(time.Hour), PayWithin: time.Minute}
	if _, err := s.Define(ctx, a, false); err != nil {
		t.Fatal(err)
	}
	// Two buyers of the same home bucket: the first takes its one item.
	var users []string
	for i := 0; len(users) < 2; i++ {
		if u := fmt.Sprintf("u%d", i); admission.HomeBucket(u, 2) == 0 {
			users = append(users, u)
		}
	}
	if d, err := s.Admit(ctx, admission.Request{Activity: "half", User: users[0], Qty: 1, RequestID: "r"}); err != nil || d.Outcome != admission.Won {
		t.Fatalf("first buyer: %+v, %v", d, err)
	}
	// Bucket 1's item is taken towards bucket 0 and not given.
	if err := s.HalfTransfer(ctx, "half", 1, 0, 1); err != nil {
		t.Fatal(err)
	}
	d, err := s.Admit(ctx, admission.Request{Activity: "half", User: users[1], Qty: 1, RequestID: "r"})
	if err != nil || d.Outcome != admission.Won {
		t.Fatalf("second buyer with the last item in flight: %+v, %v; want won", d, err)
	}
	if n, err := s.Remaining(ctx, "half"); err != nil || n != 0 {
		t.Errorf("remaining %d, %v; want 0", n, err)
	}
}

// TestRedisBucketsTransferAcrossRedefine: a transfer takes from a bucket; the activity is
// deleted and defined again, split the same way, before the transfer gives. The give must not
// add the old definition's items to the new one's bucket: found in review, the new sale sold 13
// of 10. Each transfer now carries its definition's gen, which the buckets check.
func TestRedisBucketsTransferAcrossRedefine(t *testing.T) {
	srv := testsrv.StartRedis(t)
	s, _ := redisTestStore(t, srv.Addr, redisstore.Options{RebalanceInterval: -1}, nil)
	ctx := context.Background()
	a := admission.Activity{ID: "regen", Stock: 10, Limit: 1, Buckets: 2,
		Start: time.Now().Add(-time.Minute), End: time.Now().Add(time.Hour), PayWithin: time.Minute}
	if _, err := s.Define(ctx, a, false); err != nil {
		t.Fatal(err)
	}
	rest, err := s.TransferInHalves(ctx, "regen", 0, 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "regen", true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Define(ctx, a, false); err != nil {
		t.Fatal(err)
	}
	if err := rest(); !errors.Is(err, admission.ErrUnknownActivity) {
		t.Errorf("the give of a transfer begun before the delete: %v; want ErrUnknownActivity", err)
	}
	if n, err := s.Remaining(ctx, "regen"); err != nil || n != 10 {
		t.Errorf("remaining %d, %v; want 10", n, err)
	}
	won := 0
	for i := range 20 {
		d, err := s.Admit(ctx, admission.Request{Activity: "regen", User: fmt.Sprintf("u%d", i), Qty: 1, RequestID: "r"})
		if err != nil {
			t.Fatal(err)
		}
		if d.Outcome == admission.Won {
			won++
		}
	}
	if won != 10 {
		t.Errorf("%d wins of 10 items", won)
	}
}

// TestRedisBucketsIntentWithoutGen: an intent recorded by a build before gens ("from to qty ms",
// during a rolling deploy) is completed under the parent's gen, not refused for ever.
func TestRedisBucketsIntentWithoutGen(t *testing.T) {
	srv := testsrv.StartRedis(t)
	s, raw := redisTestStore(t, srv.Addr, redisstore.Options{RebalanceInterval: -1}, nil)
	ctx := context.Background()
	a := admission.Activity{ID: "oldintent", Stock: 10, Limit: 1, Buckets: 2,
		Start: time.Now().Add(-time.Minute), End: time.Now().Add(time.Hour), PayWithin: time.Minute}
	if _, err := s.Define(ctx, a, false); err != nil {
		t.Fatal(err)
	}
	intents := "seckill:{oldintent}:intents"
	if err := raw.HSet(ctx, intents, "old-build", fmt.Sprintf("0 1 2 %d", time.Now().UnixMilli())).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.RecoverTransfers(ctx, "oldintent"); err != nil {
		t.Fatalf("recover an intent without gen: %v", err)
	}
	if n, err := raw.HLen(ctx, intents).Result(); err != nil || n != 0 {
		t.Errorf("%d intents left, %v; want none", n, err)
	}
	if n, err := s.Remaining(ctx, "oldintent"); err != nil || n != 10 {
		t.Errorf("remaining %d, %v; want 10", n, err)
	}
}

// TestRedisBucketsRemainingDuringTransfers: transfers move stock between buckets and no item is
// sold, so every reading of the activity's remaining stock, taken while they run, is the stock
// (a bucket's total and stock read apart would count a take between them as items sold).
func TestRedisBucketsRemainingDuringTransfers(t *testing.T) {
	srv := testsrv.StartRedis(t)
	s, _ := redisTestStore(t, srv.Addr, redisstore.Options{RebalanceInterval: -1}, nil)
	ctx := context.Background()
	const stock, n = 800, 4
	a := admission.Activity{ID: "moving", Stock: stock, Limit: 1, Buckets: n,
		Start: time.Now().Add(-time.Minute), End: time.Now().Add(time.Hour)}
	if _, err := s.Define(ctx, a, false); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				from := (g + k) % n
				if _, err := s.Transfer(ctx, "moving", from, (from+1+k%(n-1))%n, int64(1+k%40)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	bad := 0
	for range 2000 {
		left, err := s.Remaining(ctx, "moving")
		if err != nil {
			t.Fatal(err)
		}
		if left != stock {
			bad++
		}
	}
	close(stop)
	wg.Wait()
	if bad > 0 {
		t.Errorf("%d of 2000 readings during transfers were not the stock %d", bad, stock)
	}
}

// TestRedisBucketsLostRacesNotSoldOut: an admission whose home bucket is dry loses the race for
// every item its pulls bring in (a test hook moves them out again before it tries), while the
// other buckets hold stock. It must answer ErrContended, never sold_out; through a Guard that
// neither sets the sold-out flag nor counts towards opening the breaker; and once it stops
// losing, the same request wins. On one server and on a Cluster.
func TestRedisBucketsLostRacesNotSoldOut(t *testing.T) {
	srv := testsrv.StartRedis(t)
	single, _ := redisTestStore(t, srv.Addr, redisstore.Options{RebalanceInterval: -1}, nil)
	t.Run("single", func(t *testing.T) { testLostRaces(t, single) })
	cluster := testsrv.StartCluster(t)
	c, err := redisstore.New(redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), MaxRetries: 3}),
		redisstore.Options{RebalanceInterval: -1, KeyPrefix: "lost"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	t.Run("cluster", func(t *testing.T) { testLostRaces(t, c) })
}

func testLostRaces(t *testing.T, s *redisstore.Store) {
	ctx := context.Background()
	const stock, n = 800, 8
	a := admission.Activity{ID: "lost", Stock: stock, Limit: 1, Buckets: n,
		Start: time.Now().Add(-time.Minute), End: time.Now().Add(time.Hour), PayWithin: time.Minute}
	if _, err := s.Define(ctx, a, false); err != nil {
		t.Fatal(err)
	}
	victim := ""
	for i := 0; victim == ""; i++ {
		if u := fmt.Sprintf("v%d", i); admission.HomeBucket(u, n) == 0 {
			victim = u
		}
	}
	// Bucket 0 is dry; every item a pull brings into it leaves again at once, as if other
	// buyers had won it.
	if _, err := s.Transfer(ctx, "lost", 0, 1, stock); err != nil {
		t.Fatal(err)
	}
	var stolen atomic.Int64
	s.SetAfterPull(func(activity string, home int) {
		q, err := s.Transfer(ctx, activity, home, (home+1)%n, stock)
		if err != nil {
			t.Error(err)
		}
		stolen.Add(q)
	})
	g := admission.NewGuard(s, admission.GuardOptions{ConsecutiveFailures: 2})
	req := admission.Request{Activity: "lost", User: victim, Qty: 1, RequestID: "r"}
	for i := range 4 {
		d, flagged, err := g.Decide(ctx, req)
		if !errors.Is(err, admission.ErrContended) || errors.Is(err, admission.ErrBusy) {
			t.Fatalf("try %d: %+v (flagged %v), %v; want ErrContended", i, d, flagged, err)
		}
	}
	if stolen.Load() == 0 {
		t.Fatal("the hook moved nothing: the lost-race path did not run")
	}
	if g.SoldOut("lost") {
		t.Error("a contended refusal set the sold-out flag")
	}
	if st := g.BreakerState(); st != gobreaker.StateClosed {
		t.Errorf("breaker %v after contended refusals; want closed", st)
	}
	if st := s.BucketStats(); st.Contended != 4 {
		t.Errorf("bucket stats %+v; want 4 contended", st)
	}
	// The races end: the same request wins, and the rest of the stock sells to the last item.
	s.SetAfterPull(nil)
	d, err := g.Admit(ctx, req)
	if err != nil || d.Outcome != admission.Won {
		t.Fatalf("after the races: %+v, %v; want won", d, err)
	}
	for i := 1; i < stock; i++ {
		d, err := g.Admit(ctx, admission.Request{Activity: "lost", User: fmt.Sprintf("b%d", i), Qty: 1, RequestID: "r"})
		if err != nil || d.Outcome != admission.Won {
			t.Fatalf("buyer %d of %d: %+v, %v", i, stock, d, err)
		}
	}
	d, err = g.Admit(ctx, admission.Request{Activity: "lost", User: "late", Qty: 1, RequestID: "r"})
	if err != nil || d.Outcome != admission.SoldOut || d.Remaining != 0 || !g.SoldOut("lost") {
		t.Errorf("after the last item: %+v, %v, flag %v; want sold_out, flagged", d, err, g.SoldOut("lost"))
	}
}
