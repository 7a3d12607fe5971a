package redisclient

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// writer increments key through client every 10 ms and records when each INCR succeeded.
type writer struct {
	mu sync.Mutex
	ok []time.Time
	n  atomic.Int64 // last value read back
}

func (w *writer) run(ctx context.Context, client redis.UniversalClient, key string, done *sync.WaitGroup) {
	defer done.Done()
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		v, err := client.Incr(cctx, key).Result()
		cancel()
		if err == nil {
			w.n.Store(v)
			w.mu.Lock()
			w.ok = append(w.ok, time.Now())
			w.mu.Unlock()
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// firstAfter is the first success after t, or the zero time.
func (w *writer) firstAfter(t time.Time) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.ok {
		if s.After(t) {
			return s
		}
	}
	return time.Time{}
}

// TestClusterFailoverWatch kills the master of a key under two clients with the gateway's
// timeouts: the one built by New writes again within about a second of the promotion; the plain
// go-redis client, which waits for a MOVED that a dead node cannot send or for its 60 s reload,
// is still failing seconds after it. That difference is the cause of the stall the watch removes.
func TestClusterFailoverWatch(t *testing.T) {
	t.Run("kill", func(t *testing.T) { failoverWatch(t, false) })
	t.Run("pause", func(t *testing.T) { failoverWatch(t, true) })
}

func failoverWatch(t *testing.T, pause bool) {
	c := testsrv.StartCluster(t)
	opts := func() *redis.UniversalOptions {
		return &redis.UniversalOptions{Addrs: c.Addrs(), IsClusterMode: true, DialTimeout: time.Second,
			ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: 1}
	}
	watched := New(opts())
	plain := redis.NewUniversalClient(opts())
	t.Cleanup(func() { _ = watched.Close(); _ = plain.Close() })

	const key = "{flash}:n"
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var ww, wp writer
	wg.Add(2)
	go ww.run(ctx, watched, key, &wg)
	go wp.run(ctx, plain, key, &wg)
	defer func() { cancel(); wg.Wait() }()

	time.Sleep(500 * time.Millisecond)
	if ww.firstAfter(time.Time{}).IsZero() || wp.firstAfter(time.Time{}).IsZero() {
		t.Fatal("the writers did not write before the kill")
	}
	old := c.MasterOf(key)
	if pause {
		old.Pause()
		defer old.Resume()
	} else {
		old.Kill()
	}
	killed := time.Now()
	_, took := c.WaitFailover(old, key, time.Minute)
	promoted := killed.Add(took)

	// Generous on a loaded machine: the watch re-reads the map every 250 ms.
	var first time.Time
	for deadline := promoted.Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if first = ww.firstAfter(killed); !first.IsZero() {
			break
		}
	}
	if first.IsZero() {
		t.Fatalf("the watched client did not write within 10 s of the promotion (%s after the kill)", took)
	}
	time.Sleep(3 * time.Second)
	plainFirst := wp.firstAfter(killed)
	t.Logf("kill → promotion %s; first write after the kill: watched client %s after the kill (%s after the promotion); plain go-redis client: %v",
		took.Round(time.Millisecond), first.Sub(killed).Round(time.Millisecond), first.Sub(promoted).Round(time.Millisecond),
		map[bool]string{true: "none yet", false: plainFirst.Sub(killed).Round(time.Millisecond).String()}[plainFirst.IsZero()])
	if d := first.Sub(promoted); d > 3*time.Second {
		t.Errorf("the watched client wrote again %s after the promotion, want about a second", d)
	}
	if !plainFirst.IsZero() {
		t.Errorf("the plain client wrote again %s after the kill: the stall this package removes was not reproduced", plainFirst.Sub(killed))
	}
}
