package redisclient

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// writers increment one key through one client, several at once, each every 10 ms, and record
// every value an INCR was answered with, when it was sent and when answered.
type writers struct {
	mu   sync.Mutex
	sent []time.Time
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
				sent := time.Now()
				v, err := client.Incr(cctx, key).Result()
				cancel()
				if err == nil {
					w.mu.Lock()
					w.sent = append(w.sent, sent)
					w.ok = append(w.ok, time.Now())
					w.vals = append(w.vals, v)
					w.mu.Unlock()
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
}

// firstAfter is when the first write sent after t was answered, or the zero time. (An answer
// the master sent just before a fault may be read after it.)
func (w *writers) firstAfter(t time.Time) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	var first time.Time
	for i, s := range w.ok {
		if w.sent[i].After(t) && (first.IsZero() || s.Before(first)) {
			first = s
		}
	}
	return first
}

// duplicates sorts the INCR values answered twice. Each history of the key answers a value once,
// so a value answered twice was answered once by the replaced master's history, which the new
// master does not continue:
//
//   - lost: one of the answers came before the promotion. The old master answered it before the
//     fault, and the write had not reached the replica when it stopped; without WAIT Redis
//     allows that (asynchronous replication), and the new master answers the value again.
//   - stale: every answer came after the promotion. The old master was stopped from the fault
//     until after the promotion, and an answer it sent before it stopped is read at once (the
//     writers wait a second at most), so one of them is an answer it gave after it continued:
//     what the monitored client must never take.
//
// maxStale is the largest value answered after the promotion.
func (w *writers) duplicates(promotion time.Time) (lost, stale int, maxStale int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	early := map[int64]bool{}
	count := map[int64]int{}
	for i, v := range w.vals {
		count[v]++
		if w.ok[i].Before(promotion) {
			early[v] = true
		} else {
			maxStale = max(maxStale, v)
		}
	}
	for v, n := range count {
		switch {
		case n < 2:
		case early[v]:
			lost += n - 1
		default:
			stale += n - 1
		}
	}
	return lost, stale, maxStale
}

// TestClusterFailoverWatch kills, or stops, the master of a key under two clients with the
// gateway's timeouts. The one built by New writes again within about a second of the promotion,
// and never takes an answer the replaced master gives after the fault; the plain go-redis client,
// which waits for a MOVED that a dead node cannot send or for its 60 s reload, is still failing
// seconds after the promotion. That difference is the cause of the stall the monitor removes.
// Writes the old master answered before the fault but had not yet replicated are lost with it, as
// Redis allows without WAIT: they are logged, not failed (docs/failover.md).
//
// pause-default-timeouts runs the pause with go-redis's default timeouts, as the order backend
// does (a 3 s ReadTimeout): the monitor reads the map with its own short deadlines, so it finds
// the promotion as soon; a monitor that read through the client's nodes waited that ReadTimeout
// for every read the stopped master held.
func TestClusterFailoverWatch(t *testing.T) {
	gateway := func(addrs []string) *redis.UniversalOptions {
		return &redis.UniversalOptions{Addrs: addrs, IsClusterMode: true, DialTimeout: time.Second,
			ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: 1}
	}
	defaults := func(addrs []string) *redis.UniversalOptions {
		return &redis.UniversalOptions{Addrs: addrs, IsClusterMode: true}
	}
	t.Run("kill", func(t *testing.T) { failoverWatch(t, false, gateway) })
	t.Run("pause", func(t *testing.T) { failoverWatch(t, true, gateway) })
	t.Run("pause-default-timeouts", func(t *testing.T) { failoverWatch(t, true, defaults) })
}

func failoverWatch(t *testing.T, pause bool, options func(addrs []string) *redis.UniversalOptions) {
	c := testsrv.StartCluster(t)
	watched := New(options(c.Addrs()))
	plain := redis.NewUniversalClient(options(c.Addrs()))
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

	// Both clients write before the fault (seconds on a loaded machine).
	for deadline := time.Now().Add(10 * time.Second); ww.firstAfter(time.Time{}).IsZero() || wp.firstAfter(time.Time{}).IsZero(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the writers did not write within 10 s before the fault")
		}
	}
	time.Sleep(500 * time.Millisecond)
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
	for deadline := promotion.Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if first = ww.firstAfter(failed); !first.IsZero() {
			break
		}
	}
	if first.IsZero() {
		t.Fatalf("the watched client did not write within 15 s of the promotion (%s after the fault)", took)
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
	lostW, staleW, maxW := ww.duplicates(promotion)
	lostP, staleP, _ := wp.duplicates(promotion)
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
		"answers the replaced master gave after the fault, taken: monitored %d, plain %d; "+
		"answered before the fault and lost with the old master (not replicated in time): monitored %d, plain %d",
		took.Round(time.Millisecond), first.Sub(failed).Round(time.Millisecond), first.Sub(promotion).Round(time.Millisecond),
		plainAt, staleW, staleP, lostW, lostP)
	// At most 1.1 s was measured at load 10-23 (docs/failover.md, "The map monitor's own
	// reads"); 4 s leaves room for CI's load, and still fails the monitor that read the map
	// through go-redis, which waited the client's ReadTimeout for each read the stopped master
	// held (over 7 s after the promotion in 10 of 16 pause-default-timeouts runs).
	if d := first.Sub(promotion); d > 4*time.Second {
		t.Errorf("the monitored client wrote again %s after the promotion, want under a second", d)
	}
	if !plainFirst.IsZero() {
		t.Errorf("the plain client wrote again %s after the fault: the stall this package removes was not reproduced", plainFirst.Sub(failed))
	}
	if staleW > 0 {
		t.Errorf("the monitored client took %d answers the replaced master gave after the fault (values answered twice after the promotion)", staleW)
	}
	if maxW > onNew {
		t.Errorf("the monitored client was answered %d after the promotion, but the new master holds %d", maxW, onNew)
	}
}
