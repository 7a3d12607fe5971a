package ratelimit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

func newGCRA(t *testing.T) (*GCRA, *redis.Client) {
	t.Helper()
	srv := testsrv.StartRedis(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { client.Close() })
	return NewGCRA(client, "test"), client
}

func TestGCRABurstThenDenied(t *testing.T) {
	g, client := newGCRA(t)
	ctx := context.Background()
	// One event per hour: nothing refills during the test, whatever the machine's speed.
	r := Rate{Events: 1, Period: time.Hour, Burst: 3}
	for i := 0; i < 3; i++ {
		d, err := g.Allow(ctx, "u1", r)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed || d.Remaining != 2-i || d.RetryAfter != 0 {
			t.Fatalf("event %d of the burst: %+v, want allowed with %d remaining", i, d, 2-i)
		}
	}
	d, err := g.Allow(ctx, "u1", r)
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed || d.Remaining != 0 {
		t.Fatalf("event beyond the burst: %+v, want denied", d)
	}
	// The next token is due one interval after the first event, less the time the test took.
	if d.RetryAfter <= 59*time.Minute || d.RetryAfter > time.Hour {
		t.Errorf("RetryAfter %v, want just under 1h", d.RetryAfter)
	}
	if d.Reset <= 2*time.Hour+59*time.Minute || d.Reset > 3*time.Hour {
		t.Errorf("Reset %v, want just under 3h", d.Reset)
	}
	// The key carries an expiry, so idle keys leave Redis.
	ttl, err := client.PTTL(ctx, "test:rl:u1").Result()
	if err != nil || ttl <= 0 {
		t.Errorf("PTTL of the key: %v, %v; want a positive expiry", ttl, err)
	}
}

func TestGCRARefill(t *testing.T) {
	g, _ := newGCRA(t)
	ctx := context.Background()
	r := Rate{Events: 1, Period: 50 * time.Millisecond, Burst: 1}
	if d, err := g.Allow(ctx, "k", r); err != nil || !d.Allowed {
		t.Fatalf("first event: %+v, %v", d, err)
	}
	// A denial tells how long to wait; after that wait the next event passes.
	var d Decision
	for {
		var err error
		if d, err = g.Allow(ctx, "k", r); err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			break
		}
		// The machine was slow enough for the bucket to refill already; try again.
	}
	if d.RetryAfter <= 0 || d.RetryAfter > 50*time.Millisecond {
		t.Fatalf("RetryAfter %v, want in (0, 50ms]", d.RetryAfter)
	}
	time.Sleep(d.RetryAfter)
	if d, err := g.Allow(ctx, "k", r); err != nil || !d.Allowed {
		t.Fatalf("after waiting RetryAfter: %+v, %v; want allowed", d, err)
	}
}

func TestGCRAConcurrentNeverExceedsBurst(t *testing.T) {
	g, _ := newGCRA(t)
	ctx := context.Background()
	r := Rate{Events: 1, Period: time.Hour, Burst: 25}
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 10; j++ {
				d, err := g.Allow(ctx, "hot", r)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					allowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got := allowed.Load(); got != 25 {
		t.Errorf("%d of 200 concurrent events allowed, want exactly the burst 25", got)
	}
}

func TestGCRAKeysAreIndependent(t *testing.T) {
	g, client := newGCRA(t)
	ctx := context.Background()
	r := Rate{Events: 1, Period: time.Hour, Burst: 1}
	if d, _ := g.Allow(ctx, "a", r); !d.Allowed {
		t.Fatal("a denied")
	}
	if d, _ := g.Allow(ctx, "a", r); d.Allowed {
		t.Fatal("a allowed twice")
	}
	if d, err := g.Allow(ctx, "b", r); err != nil || !d.Allowed {
		t.Fatalf("b shares a's bucket: %+v, %v", d, err)
	}
	// Another prefix is another limiter.
	if d, err := NewGCRA(client, "other").Allow(ctx, "a", r); err != nil || !d.Allowed {
		t.Fatalf("a under another prefix shares the bucket: %+v, %v", d, err)
	}
	keys, err := client.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"test:rl:a": true, "test:rl:b": true, "other:rl:a": true}
	if len(keys) != len(want) {
		t.Errorf("keys %v, want %v", keys, want)
	}
	for _, k := range keys {
		if !want[k] {
			t.Errorf("unexpected key %q", k)
		}
	}
}

func TestGCRAInvalidRate(t *testing.T) {
	g, _ := newGCRA(t)
	if _, err := g.Allow(context.Background(), "k", Rate{}); err == nil {
		t.Error("zero rate accepted")
	}
}

func TestGCRARedisDown(t *testing.T) {
	srv := testsrv.StartRedis(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	defer client.Close()
	g := NewGCRA(client, "")
	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := g.Allow(ctx, "k", Rate{1, time.Second, 1}); err == nil {
		t.Error("no error with Redis down")
	}
}
