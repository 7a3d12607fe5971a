package admission_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/admissiontest"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestRedisBuckets runs the split-activity cases on one server, with the rebalancer off (pulls
// alone must keep every promise) and on.
func TestRedisBuckets(t *testing.T) {
	srv := testsrv.StartRedis(t)
	var n atomic.Int64
	for _, v := range []struct {
		name string
		opts admission.RedisOptions
	}{
		{"pulls_only", admission.RedisOptions{RebalanceInterval: -1}},
		{"rebalancer", admission.RedisOptions{}},
		{"single_calls", admission.RedisOptions{AdmitBatch: 1, RebalanceInterval: -1}},
	} {
		t.Run(v.name, func(t *testing.T) {
			admissiontest.RunBuckets(t, func(t *testing.T) admission.Store {
				opts := v.opts
				opts.KeyPrefix = fmt.Sprintf("bk%d", n.Add(1))
				s, _ := redisTestStore(t, srv.Addr, opts, nil)
				return s
			})
		})
	}
}

// TestRedisBucketsCluster runs them on a Cluster of three masters and three replicas, where the
// buckets are on different shards.
func TestRedisBucketsCluster(t *testing.T) {
	cluster := testsrv.StartCluster(t)
	var n atomic.Int64
	admissiontest.RunBuckets(t, func(t *testing.T) admission.Store {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), MaxRetries: 3})
		s, err := admission.NewRedisStore(c, admission.RedisOptions{KeyPrefix: fmt.Sprintf("bk%d", n.Add(1))})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestBucketsNeedRedis: one node has no shards to spread a split activity over, so the memory
// and local stores refuse it; every store refuses a count out of range or above the stock.
func TestBucketsNeedRedis(t *testing.T) {
	local, err := admission.OpenLocalStore(t.TempDir(), admission.LocalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = local.Close() })
	mem := admission.NewMemoryStore(admission.MemoryOptions{})
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
	rs, _ := redisTestStore(t, srv.Addr, admission.RedisOptions{}, nil)
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
	a, _ := redisTestStore(t, srv.Addr, admission.RedisOptions{RebalanceInterval: -1}, nil)
	b, _ := redisTestStore(t, srv.Addr, admission.RedisOptions{RebalanceInterval: -1}, nil)
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
	s, _ := redisTestStore(t, srv.Addr, admission.RedisOptions{RebalanceInterval: -1}, nil)
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
