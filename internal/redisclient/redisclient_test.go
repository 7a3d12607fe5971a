package redisclient

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// writers increment one key through one client, several at once, each every 10 ms, and record
// every value an INCR was answered with and when.
type writers struct {
	mu   sync.Mutex
	ok   []time.Time
	vals []int64
}

func (w *writers) run(ctx context.Context, client redis.UniversalClient, key string, n int, done *sync.WaitGroup) {
	for range n {
		done.Add(1)
		go func() {
			defer done.Done()
			for ctx.Err() == nil {
				cctx, cancel := context.WithTimeout(ctx, time.Second)
				v, err := client.Incr(cctx, key).Result()
				cancel()
				if err == nil {
					w.mu.Lock()
					w.ok = append(w.ok, time.Now())
					w.vals = append(w.vals, v)
					w.mu.Unlock()
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
}

// firstAfter is the first success after t, or the zero time.
func (w *writers) firstAfter(t time.Time) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	var first time.Time
	for _, s := range w.ok {
		if s.After(t) && (first.IsZero() || s.Before(first)) {
			first = s
		}
	}
	return first
}

// duplicates counts the INCR answers given twice: each value is answered once by one history of
// the key, so a duplicate is an answer from the replaced master's discarded history.
func (w *writers) duplicates() (dup int, maxVal int64) {
	w.mu.Lock()
	vals := append([]int64(nil), w.vals...)
	w.mu.Unlock()
	sort.Slice(vals, func(i, j int) bool { return vals[i] < vals[j] })
	for i, v := range vals {
		if i > 0 && v == vals[i-1] {
			dup++
		}
		maxVal = max(maxVal, v)
	}
	return dup, maxVal
}

// TestClusterFailoverWatch kills, or stops, the master of a key under two clients with the
// gateway's timeouts. The one built by New writes again within about a second of the promotion,
// and never takes an answer from the replaced master; the plain go-redis client, which waits for
// a MOVED that a dead node cannot send or for its 60 s reload, is still failing seconds after the
// promotion. That difference is the cause of the stall the monitor removes.
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

	// One key per client: the plain client's answers from the old master must not count against
	// the watched one.
	const wkey, pkey = "{flash}:watched", "{flash}:plain"
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var ww, wp writers
	ww.run(ctx, watched, wkey, 8, &wg)
	wp.run(ctx, plain, pkey, 8, &wg)
	defer func() { cancel(); wg.Wait() }()

	time.Sleep(500 * time.Millisecond)
	if ww.firstAfter(time.Time{}).IsZero() || wp.firstAfter(time.Time{}).IsZero() {
		t.Fatal("the writers did not write before the fault")
	}
	old := c.MasterOf(wkey)
	if pause {
		old.Pause()
	} else {
		old.Kill()
	}
	failed := time.Now()
	promoted, took := c.WaitFailover(old, wkey, time.Minute)
	promotion := failed.Add(took)

	// Generous on a loaded machine: the monitor re-reads the map every 250 ms.
	var first time.Time
	for deadline := promotion.Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if first = ww.firstAfter(failed); !first.IsZero() {
			break
		}
	}
	if first.IsZero() {
		t.Fatalf("the watched client did not write within 10 s of the promotion (%s after the fault)", took)
	}
	time.Sleep(3 * time.Second)
	plainFirst := wp.firstAfter(failed)
	if pause { // the old master continues with the writers' commands in its sockets
		old.Resume()
		c.WaitHealthy()
		time.Sleep(time.Second)
	}
	cancel()
	wg.Wait()
	dupW, maxW := ww.duplicates()
	dupP, _ := wp.duplicates()
	pc := promoted.Client()
	defer func() { _ = pc.Close() }()
	onNew, err := pc.Get(context.Background(), wkey).Int64()
	if err != nil {
		t.Fatal(err)
	}
	plainAt := "none yet"
	if !plainFirst.IsZero() {
		plainAt = plainFirst.Sub(failed).Round(time.Millisecond).String()
	}
	t.Logf("fault → promotion %s; first write after the fault: monitored client %s (%s after the promotion), plain go-redis client %s; "+
		"answers from the replaced master taken: monitored %d, plain %d",
		took.Round(time.Millisecond), first.Sub(failed).Round(time.Millisecond), first.Sub(promotion).Round(time.Millisecond),
		plainAt, dupW, dupP)
	// About a second is expected (docs/failover.md has the measured figures); the bound only has
	// to tell the monitor from go-redis's minute-long stall, on a loaded machine where a reload
	// that asks the stopped node waits out its 500 ms timeout (a CI run took 3.3 s).
	if d := first.Sub(promotion); d > 6*time.Second {
		t.Errorf("the monitored client wrote again %s after the promotion, want about a second", d)
	}
	if !plainFirst.IsZero() {
		t.Errorf("the plain client wrote again %s after the fault: the stall this package removes was not reproduced", plainFirst.Sub(failed))
	}
	if dupW > 0 {
		t.Errorf("the monitored client took %d answers from the replaced master (values answered twice)", dupW)
	}
	if maxW > onNew {
		t.Errorf("the monitored client was answered %d, but the new master holds %d", maxW, onNew)
	}
}
