package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

const (
	xferActivity = "xfer"
	xferStock    = 2000
	xferBuckets  = 4
	xferPrefix   = "crash"
)

// helperAddrEnv carries the Redis address to the child of TestRedisHelperProcess.
const helperAddrEnv = "SECKILL_REDIS_HELPER_ADDR"

// TestRedisHelperProcess is the child's entry point: tests re-execute their own binary with
// helperAddrEnv set, so that transfers run in a process they can SIGKILL. It does nothing in a
// normal run.
func TestRedisHelperProcess(t *testing.T) {
	addr := os.Getenv(helperAddrEnv)
	if addr == "" {
		t.Skip("helper process for the bucket transfer crash test")
	}
	fmt.Printf("E %v\n", helperTransfers(addr))
	os.Exit(3)
}

// helperTransfers runs random transfers between the buckets of xferActivity, from several
// goroutines, until it is killed.
func helperTransfers(addr string) error {
	s, err := New(redis.NewClient(&redis.Options{Addr: addr, MaxRetries: 3}),
		Options{KeyPrefix: xferPrefix, RebalanceInterval: -1})
	if err != nil {
		return err
	}
	ctx := context.Background()
	fmt.Println("READY")
	errs := make(chan error)
	for range 4 {
		go func() {
			for {
				from, to := rand.IntN(xferBuckets), rand.IntN(xferBuckets)
				if from == to {
					continue
				}
				if _, err := s.Transfer(ctx, xferActivity, from, to, int64(1+rand.IntN(60))); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	return <-errs
}

// TestRedisBucketTransferCrash SIGKILLs a child running stock transfers at random moments, while
// this process sells, and checks after each kill, once the pending transfers are recovered, that
// no item was created or destroyed: the buckets' totals add up to the stock, and what is sold
// plus what remains is the stock.
func TestRedisBucketTransferCrash(t *testing.T) {
	rounds := 8
	if os.Getenv("SECKILL_CHAOS") == "full" {
		rounds = 40
	}
	srv := testsrv.StartRedis(t)
	ctx := context.Background()
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = raw.Close() })
	s, err := New(redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: 3}),
		Options{KeyPrefix: xferPrefix, RebalanceInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	now := time.Now()
	if _, err := s.Define(ctx, admission.Activity{ID: xferActivity, Stock: xferStock, Limit: 1, Buckets: xferBuckets,
		Start: now.Add(-time.Minute), End: now.Add(time.Hour)}, false); err != nil {
		t.Fatal(err)
	}
	var won, user int
	var recovered int64
	for round := range rounds {
		p, lines := testsrv.StartChild(t, "TestRedisHelperProcess", helperAddrEnv+"="+srv.Addr)
		testsrv.WaitLine(t, lines, "READY", nil)
		go func() {
			for range lines { //nolint:revive // drain
			}
		}()
		// Sell while the child moves stock: some buyers meet a bucket in the middle of a transfer.
		var wg sync.WaitGroup
		var mu sync.Mutex
		stop := time.Now().Add(time.Duration(50+rand.IntN(300)) * time.Millisecond)
		for range 4 {
			wg.Go(func() {
				for time.Now().Before(stop) {
					mu.Lock()
					user++
					u := "u" + strconv.Itoa(user)
					mu.Unlock()
					d, err := s.Admit(ctx, admission.Request{Activity: xferActivity, User: u, Qty: 1, RequestID: "r"})
					if err != nil {
						t.Error(err)
						return
					}
					if d.Outcome == admission.Won {
						mu.Lock()
						won++
						mu.Unlock()
					}
					time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
				}
			})
		}
		wg.Wait()
		testsrv.KillChild(t, p)
		pending, err := raw.HLen(ctx, xferPrefix+":{"+xferActivity+"}:intents").Result()
		if err != nil {
			t.Fatal(err)
		}
		if err := s.RecoverTransfers(ctx, xferActivity); err != nil {
			t.Fatalf("round %d: recover: %v", round, err)
		}
		recovered += pending
		checkTransferTotals(t, raw, round, won)
		if t.Failed() {
			return
		}
	}
	t.Logf("%d rounds: %d items sold, %d transfers pending at a kill and recovered; store counters %+v",
		rounds, won, recovered, s.BucketStats())
}

func checkTransferTotals(t *testing.T, raw *redis.Client, round, won int) {
	t.Helper()
	ctx := context.Background()
	key := func(id, name string) string { return xferPrefix + ":{" + id + "}:" + name }
	if n, err := raw.HLen(ctx, key(xferActivity, "intents")).Result(); err != nil || n != 0 {
		t.Errorf("round %d: %d intents left after recovery (%v)", round, n, err)
	}
	total, err := raw.HGet(ctx, key(xferActivity, "meta"), "total").Int64()
	if err != nil || total != xferStock {
		t.Errorf("round %d: parent total %d (%v), want %d", round, total, err, xferStock)
	}
	var totals, left int64
	for i := range xferBuckets {
		b := bucketID(xferActivity, i, xferBuckets)
		bt, err1 := raw.HGet(ctx, key(b, "meta"), "stock_total").Int64()
		bs, err2 := raw.Get(ctx, key(b, "stock")).Int64()
		if err1 != nil || err2 != nil || bs < 0 || bs > bt {
			t.Errorf("round %d: bucket %d total %d stock %d (%v, %v)", round, i, bt, bs, err1, err2)
		}
		totals += bt
		left += bs
	}
	if totals != xferStock || totals-left != int64(won) {
		t.Errorf("round %d: buckets hold %d items in total, %d left: %d sold, want %d of %d", round, totals, left, totals-left, won, xferStock)
	}
}
