package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestRedisBucketsClusterFailover SIGKILLs the master of one bucket's shard in the middle of a
// sale split over 8 buckets on a 3+3 Cluster, with replicas_ack 1. Buyers keep buying (a failed
// call is retried with the same request id) until the sale is sold out. Asserted: every win
// answered is on the promoted cluster (the old master comes back as a replica) (its buyer's result names it), no more wins than stock,
// and at the end the whole stock is sold, the buckets' totals add up to it and no transfer is
// left pending. A win's result is read back from its bucket's :results and :users field.
func TestRedisBucketsClusterFailover(t *testing.T) {
	const stock, buckets, buyers = 300, 8, 16
	cluster := testsrv.StartCluster(t)
	ctx := context.Background()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), MaxRetries: 3,
		DialTimeout: 250 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second})
	s, err := redisstore.New(c, redisstore.Options{ReplicasAck: 1, ReplicasAckTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	a := redisOpen("fob", stock, 1)
	a.Buckets = buckets
	redisDefine(t, s, a)
	if l, err := c.HGet(ctx, "seckill:{fob#0/8}:meta", "layout").Result(); err != nil || l != "2" {
		t.Fatalf("bucket 0's layout %q (%v), want 2", l, err)
	}

	var (
		mu       sync.Mutex
		wins     = map[string]string{} // user -> reservation id answered
		errs     atomic.Int64
		next     atomic.Int64
		soldOut  atomic.Bool
		killed   = make(chan struct{})
		wg       sync.WaitGroup
		startKil = make(chan struct{})
	)
	var once sync.Once
	for range buyers {
		wg.Go(func() {
			for !soldOut.Load() {
				u := fmt.Sprintf("u%d", next.Add(1))
				for attempt := 0; ; attempt++ {
					cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					d, err := s.Admit(cctx, admission.Request{Activity: "fob", User: u, Qty: 1, RequestID: "r"})
					cancel()
					if err != nil {
						errs.Add(1)
						if attempt > 200 {
							t.Errorf("%s: still failing: %v", u, err)
							return
						}
						time.Sleep(50 * time.Millisecond)
						continue
					}
					if d.Outcome == admission.Won {
						mu.Lock()
						wins[u] = d.ReservationID
						if len(wins) == stock/3 {
							once.Do(func() { close(startKil) })
						}
						mu.Unlock()
					} else if d.Outcome == admission.SoldOut && d.Remaining == 0 {
						soldOut.Store(true)
					}
					break
				}
				select {
				case <-killed:
				default:
					time.Sleep(time.Millisecond) // before the kill: leave the sale time to reach it
				}
			}
		})
	}
	<-startKil
	key := "seckill:{fob#0/8}:meta"
	old := cluster.MasterOf(key)
	old.Kill()
	promoted, took := cluster.WaitFailover(old, key, time.Minute)
	// go-redis's Cluster client alone does not re-read the slot map after a dial error; the
	// gateway's client (internal/redisclient) watches it, and that client has no replicas_ack.
	c.ReloadState(ctx)
	// With one replica per master, the promoted one has none until the old master is back as
	// its replica: until then replicas_ack refuses the shard's wins (ErrNotReplicated, retried).
	old.Restart()
	close(killed)
	wg.Wait()
	t.Logf("master %s of bucket 0 killed after %d wins; %s promoted in %s; %d calls failed and were retried; counters %+v",
		old.Addr, stock/3, promoted.Addr, took.Round(time.Millisecond), errs.Load(), s.BucketStats())

	if len(wins) != stock {
		t.Errorf("%d wins answered, stock %d", len(wins), stock)
	}
	for u, resv := range wins {
		r, err := s.GetResult(ctx, "fob", u)
		if err != nil || r.ReservationID != resv {
			t.Errorf("win %s of %s: result %+v, %v: lost in the failover", resv, u, r, err)
		}
	}
	// Transfers cut by the failover are completed by the rebalancer once they are old enough.
	deadline := time.Now().Add(30 * time.Second)
	for {
		snap, err := s.Activity(ctx, "fob")
		if err == nil && snap.Sold == stock && snap.Remaining == 0 && snap.Buyers == stock {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the failover: %+v, %v", snap, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n, err := s.Remaining(ctx, "fob"); err != nil || n != 0 {
		t.Errorf("remaining %d, %v", n, err)
	}
}
