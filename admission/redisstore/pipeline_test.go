package redisstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestRedisAdmitPipelines: concurrent buys of many activities travel in shared pipelines (more
// than one activity's script call in a pipeline) and every activity still sells exactly its
// stock, once per buyer, on a single server and on a Cluster, where a pipeline's calls go to the
// masters of their activities' slots.
func TestRedisAdmitPipelines(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		srv := testsrv.StartRedis(t)
		testRedisAdmitPipelines(t, redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: 3, PoolSize: 64, PoolTimeout: 30 * time.Second}))
	})
	t.Run("cluster", func(t *testing.T) {
		cluster := testsrv.StartCluster(t)
		testRedisAdmitPipelines(t, redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), MaxRetries: 3, PoolSize: 64, PoolTimeout: 30 * time.Second}))
	})
}

func testRedisAdmitPipelines(t *testing.T, client redis.UniversalClient) {
	const (
		activities = 8
		stock      = 40
		buyers     = 250 // per activity
	)
	ctx := context.Background()
	s, err := New(client, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	// Count the activities of each pipeline; set before the store is used.
	var widest, pipelines atomic.Int64
	run := s.groups.run
	s.groups.run = func(ctx context.Context, batches []admitBatch) {
		pipelines.Add(1)
		seen := map[string]bool{}
		for _, b := range batches {
			if seen[b.activity] {
				t.Errorf("activity %s twice in one pipeline", b.activity)
			}
			seen[b.activity] = true
		}
		for n := int64(len(batches)); ; {
			if w := widest.Load(); n <= w || widest.CompareAndSwap(w, n) {
				break
			}
		}
		run(ctx, batches)
	}
	now := time.Now()
	for a := range activities {
		if _, err := s.Define(ctx, admission.Activity{ID: fmt.Sprintf("p%d", a), Stock: stock, Limit: 1,
			Start: now.Add(-time.Minute), End: now.Add(time.Hour), PayWithin: time.Minute}, false); err != nil {
			t.Fatal(err)
		}
	}
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		wins  [activities]atomic.Int64
		resv  sync.Map
	)
	for a := range activities {
		for u := range buyers {
			wg.Go(func() {
				<-start
				act := fmt.Sprintf("p%d", a)
				d, err := s.Admit(ctx, admission.Request{Activity: act, User: fmt.Sprintf("u%d", u), Qty: 1, RequestID: "r"})
				if err != nil {
					t.Errorf("admit %s u%d: %v", act, u, err)
					return
				}
				switch d.Outcome {
				case admission.Won:
					wins[a].Add(1)
					if _, dup := resv.LoadOrStore(act+" "+d.ReservationID, true); dup {
						t.Errorf("reservation %s of %s handed out twice", d.ReservationID, act)
					}
				case admission.SoldOut:
				default:
					t.Errorf("admit %s u%d: %v", act, u, d.Outcome)
				}
			})
		}
	}
	close(start)
	wg.Wait()
	for a := range activities {
		act := fmt.Sprintf("p%d", a)
		if n := wins[a].Load(); n != stock {
			t.Errorf("%s: %d wins, want %d", act, n, stock)
		}
		snap, err := s.Activity(ctx, act)
		if err != nil {
			t.Fatal(err)
		}
		if snap.Remaining != 0 || snap.Buyers != stock || snap.Queued != stock {
			t.Errorf("%s after the rush: %+v, want 0 left, %d buyers, %d queued", act, snap, stock, stock)
		}
	}
	t.Logf("%d buys of %d activities in %d pipelines, the widest with %d activities", activities*buyers, activities, pipelines.Load(), widest.Load())
	if widest.Load() < 2 {
		t.Errorf("no pipeline carried more than one activity's call")
	}
}
