package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestRedisBucketReadsAtomic: transfers move a bucket's stock_total and stock together, so a read
// of the two that a transfer step can fall between sees a bucket whose sold count is off by the
// step's items. Goroutines move stock between the buckets while others read: Remaining and the
// snapshot's Remaining and Sold must never show an item created or destroyed. On one server and
// on a Cluster (buckets on three masters). The readers' connections deliver what the client
// writes in small pieces, as a congested link does, so that Redis runs the transfers' scripts
// between the commands of one read's pipeline: a read that is not atomic per bucket tears within
// a second (it did before bucket_read.lua; unchopped, 256 buckets tore in none of ~600 reads).
func TestRedisBucketReadsAtomic(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		srv := testsrv.StartRedis(t)
		movers, _ := redisTestStore(t, srv.Addr, redisstore.Options{RebalanceInterval: -1}, nil)
		readers, _ := redisTestStore(t, srv.Addr, redisstore.Options{RebalanceInterval: -1},
			func(o *redis.Options) { o.Dialer = chopDialer })
		checkBucketReads(t, movers, readers)
	})
	t.Run("cluster", func(t *testing.T) {
		cluster := testsrv.StartCluster(t)
		store := func(dialer func(context.Context, string, string) (net.Conn, error)) *redisstore.Store {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), MaxRetries: 3, Dialer: dialer})
			s, err := redisstore.New(c, redisstore.Options{RebalanceInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		}
		checkBucketReads(t, store(nil), store(chopDialer))
	})
}

// chopDialer dials a connection whose writes reach the server in pieces of at most 96 bytes
// (a command or two), a pause apart.
func chopDialer(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return chopConn{c}, nil
}

type chopConn struct{ net.Conn }

func (c chopConn) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		k := min(len(b), 96)
		m, err := c.Conn.Write(b[:k])
		n += m
		if err != nil {
			return n, err
		}
		b = b[k:]
		time.Sleep(20 * time.Microsecond)
	}
	return n, nil
}

// checkBucketReads moves stock between the buckets of a split activity through movers while
// readers reads it, and fails at the first read showing other than the items that exist.
func checkBucketReads(t *testing.T, movers, readers *redisstore.Store) {
	const (
		buckets  = 64
		stock    = buckets * 40
		sold     = 10 // won before the transfers start, so that sold counts are not all zero
		nMovers  = 8
		nReaders = 4
	)
	ctx := context.Background()
	a := redisOpen("torn", stock, 1)
	a.Buckets = buckets
	redisDefine(t, movers, a)
	for i := range sold {
		if d := redisAdmit(t, movers, a.ID, fmt.Sprintf("u%d", i), "r"); d.Outcome != admission.Won {
			t.Fatalf("buyer %d: %+v", i, d)
		}
	}
	const want = stock - sold
	deadline := time.Now().Add(3 * time.Second)
	var (
		moves, reads, torn atomic.Int64
		wg                 sync.WaitGroup
		mu                 sync.Mutex
		first              string
	)
	fail := func(format string, args ...any) {
		if torn.Add(1) == 1 {
			mu.Lock()
			first = fmt.Sprintf(format, args...)
			mu.Unlock()
		}
	}
	for g := range nMovers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for time.Now().Before(deadline) && torn.Load() == 0 {
				from, to := r.IntN(buckets), r.IntN(buckets)
				if from == to {
					continue
				}
				if _, err := movers.Transfer(ctx, a.ID, from, to, 1+r.Int64N(20)); err != nil {
					fail("transfer %d -> %d: %v", from, to, err)
					return
				}
				moves.Add(1)
			}
		})
	}
	for g := range nReaders {
		wg.Go(func() {
			for time.Now().Before(deadline) && torn.Load() == 0 {
				if g%2 == 0 {
					left, err := readers.Remaining(ctx, a.ID)
					if err != nil {
						fail("remaining: %v", err)
						return
					}
					if left != want {
						fail("remaining %d, want %d", left, want)
					}
				} else {
					snap, err := readers.Activity(ctx, a.ID)
					if err != nil {
						fail("activity: %v", err)
						return
					}
					if snap.Remaining != want || snap.Sold != sold {
						fail("snapshot remaining %d sold %d, want %d and %d", snap.Remaining, snap.Sold, want, sold)
					}
				}
				reads.Add(1)
			}
		})
	}
	wg.Wait()
	t.Logf("%d transfers, %d reads, %d torn", moves.Load(), reads.Load(), torn.Load())
	if torn.Load() > 0 {
		t.Fatalf("%d reads showed items created or destroyed; the first: %s", torn.Load(), first)
	}
	if moves.Load() < 100 || reads.Load() < 50 {
		t.Fatalf("too little concurrency to tell: %d transfers, %d reads", moves.Load(), reads.Load())
	}
	if left, err := readers.Remaining(ctx, a.ID); err != nil || left != want {
		t.Fatalf("remaining at rest: %d, %v; want %d", left, err, want)
	}
}
