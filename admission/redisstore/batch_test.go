package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestRedisGroupedAdmission sends many concurrent calls for one activity, so that they share
// script calls, and mixes into the same batches what a batch must keep apart: one user's retries
// of one request id, one user's distinct requests, and requests that are bad input.
func TestRedisGroupedAdmission(t *testing.T) {
	ctx := context.Background()
	srv := testsrv.StartRedis(t)
	s, raw := redisTestStore(t, srv.Addr, redisstore.Options{}, func(o *redis.Options) { o.PoolSize = 8 })
	redisDefine(t, s, redisOpen("g1", 100, 2))
	redisAdmit(t, s, "g1", "warm-up", "r") // loads the script; takes one item
	before := redisEvalCalls(t, raw)

	const users = 300
	type result struct {
		user, req string
		qty       int64
		d         admission.Decision
		err       error
	}
	var (
		mu      sync.Mutex
		results []result
		wg      sync.WaitGroup
		start   = make(chan struct{})
	)
	for u := range users {
		user := fmt.Sprintf("u%d", u)
		// Two calls with request id a (a retry), one with b, one with qty 3 > limit 2.
		for _, c := range []struct {
			req string
			qty int64
		}{{"a", 1}, {"a", 1}, {"b", 1}, {"c", 3}} {
			wg.Go(func() {
				<-start
				d, err := s.Admit(ctx, admission.Request{Activity: "g1", User: user, Qty: c.qty, RequestID: c.req})
				mu.Lock()
				results = append(results, result{user, c.req, c.qty, d, err})
				mu.Unlock()
			})
		}
	}
	close(start)
	wg.Wait()

	calls := redisEvalCalls(t, raw) - before
	if calls >= 4*users {
		t.Errorf("%d script calls for %d admissions: nothing was grouped", calls, 4*users)
	}
	t.Logf("%d admissions in %d script calls", 4*users, calls)

	first := map[string]admission.Decision{} // user + request id → the won decision
	held := map[string]int64{}
	wins := map[string]bool{}
	for _, r := range results {
		if r.qty == 3 {
			if !errors.Is(r.err, admission.ErrBadInput) || !strings.Contains(r.err.Error(), "admit g1") {
				t.Errorf("%s qty 3: %+v, %v; want bad input", r.user, r.d, r.err)
			}
			continue
		}
		if r.err != nil {
			t.Fatalf("%s %s: %v", r.user, r.req, r.err)
		}
		switch r.d.Outcome {
		case admission.Won:
			k := r.user + "/" + r.req
			if prev, ok := first[k]; ok && prev.ReservationID != r.d.ReservationID {
				t.Errorf("%s got two reservations for one request id: %s and %s", k, prev.ReservationID, r.d.ReservationID)
			}
			if !wins[r.d.ReservationID] {
				wins[r.d.ReservationID] = true
				held[r.user]++
			}
			first[k] = r.d
		case admission.SoldOut:
		default:
			t.Errorf("%s %s: unexpected %v", r.user, r.req, r.d.Outcome)
		}
	}
	for u, n := range held {
		if n > 2 {
			t.Errorf("user %s holds %d, above the limit 2", u, n)
		}
	}
	if len(wins) != 99 {
		t.Errorf("%d distinct wins, want the 99 items left after the warm-up", len(wins))
	}
	if n := redisInt(t, raw, "seckill:{g1}:stock"); n != 0 {
		t.Errorf("stock = %d, want 0", n)
	}
	if n := len(redisStreamWins(t, raw, "g1")); n != 100 {
		t.Errorf("stream holds %d wins, want 100 (with the warm-up)", n)
	}
}

// TestRedisGroupedCancel checks the two ways a caller's context can end: while its call still
// waits in the queue (it is withdrawn and nothing is sent for it), and after its batch was sent
// (the batch still runs for everybody else in it, and answers into the gone caller's call, so
// that call must not serve the callers who come after: each of them gets its own answer).
func TestRedisGroupedCancel(t *testing.T) {
	ctx := context.Background()
	srv := testsrv.StartRedis(t)
	s, raw := redisTestStore(t, srv.Addr, redisstore.Options{AdmitInFlight: 1}, nil)
	redisDefine(t, s, redisOpen("c1", 10, 1))
	redisAdmit(t, s, "c1", "warm-up", "r")
	// The warm-up's batch counts as in flight until its goroutine looks at the queue again, after
	// the answer: waiting for "sent" in flight must not find that one instead (a CI run at load
	// did, and then "sent" and "queued" went out in one batch).
	waitQueueIdle(t, s, "c1")

	// Paused, the server holds the first call in flight, so the next ones queue behind it.
	srv.Pause()
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	type answer struct {
		d   admission.Decision
		err error
	}
	admit := func(ctx context.Context, user string) chan answer {
		ch := make(chan answer, 1)
		go func() {
			d, err := s.Admit(ctx, admission.Request{Activity: "c1", User: user, Qty: 1, RequestID: "r"})
			ch <- answer{d, err}
		}()
		return ch
	}
	var sent, queued chan answer
	// answered says which callers already have an answer: for a failure, to tell a call that
	// left the flight early (an answer before the pause, a timeout) from one that never queued.
	answered := func() string {
		var out []string
		for name, ch := range map[string]chan answer{"sent": sent, "queued": queued} {
			select {
			case a := <-ch:
				out = append(out, fmt.Sprintf("%s answered %+v, %v", name, a.d, a.err))
			default:
			}
		}
		return strings.Join(out, "; ")
	}
	waitQueue := func(pending int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			if p, f := s.AdmitQueue("c1"); p == pending && f == 1 {
				return
			}
			if time.Now().After(deadline) {
				p, f := s.AdmitQueue("c1")
				// Where every goroutine waits: a CI run at load found a caller that never queued.
				_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
				t.Fatalf("queue: %d pending, %d in flight; want %d and 1 (%s)", p, f, pending, answered())
			}
		}
	}

	sentCtx, cancelSent := context.WithCancel(ctx)
	sent = admit(sentCtx, "sent") // in flight, its reply held by the paused server
	waitQueue(0)
	queuedCtx, cancelQueued := context.WithCancel(ctx)
	queued = admit(queuedCtx, "queued")
	waitQueue(1)
	later := admit(ctx, "later")
	waitQueue(2)

	cancelQueued()
	if a := <-queued; !errors.Is(a.err, context.Canceled) {
		t.Fatalf("queued caller after cancel: %+v, %v", a.d, a.err)
	}
	waitQueue(1) // withdrawn: only "later" waits
	cancelSent()
	if a := <-sent; !errors.Is(a.err, context.Canceled) {
		t.Fatalf("sent caller after cancel: %+v, %v", a.d, a.err)
	}
	// Callers after the cancels, while "sent" is still in flight: the store reuses answered
	// calls, and one of these would be handed the call "sent" left if that went back too.
	const after = 6
	afters := make([]chan answer, after)
	for i := range afters {
		afters[i] = admit(ctx, fmt.Sprint("after-", i))
	}
	waitQueue(1 + after)

	srv.Resume()
	resumed = true
	if a := <-later; a.err != nil || a.d.Outcome != admission.Won {
		t.Fatalf("later caller: %+v, %v", a.d, a.err)
	}
	for i, ch := range afters {
		user := fmt.Sprint("after-", i)
		a := <-ch
		r, err := s.GetResult(ctx, "c1", user)
		if a.err != nil || a.d.Outcome != admission.Won || err != nil || a.d.ReservationID != r.ReservationID {
			t.Errorf("%s: answered %+v, %v; its result %+v, %v: want its own win", user, a.d, a.err, r, err)
		}
	}
	// "sent" was decided although its caller had gone; "queued" never reached the server.
	if n := redisHeld(t, raw, "c1", "sent"); n != 1 {
		t.Errorf("the sent call's batch did not run: sent holds %d", n)
	}
	if raw.HExists(ctx, "seckill:{c1}:users", "queued").Val() {
		t.Error("a withdrawn call was admitted")
	}
	if n := redisInt(t, raw, "seckill:{c1}:stock"); n != 10-3-after {
		t.Errorf("stock = %d, want %d (warm-up, sent, later and the %d after them)", n, 10-3-after, after)
	}
	waitQueueIdle(t, s, "c1") // the last batch's goroutine lets go of the queue after its answers
}

// waitQueueIdle waits until nothing of activity waits or is in flight in s's group admission.
func waitQueueIdle(t *testing.T, s *redisstore.Store, activity string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		p, f := s.AdmitQueue(activity)
		if p == 0 && f == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue left behind after 10 s: %d pending, %d in flight", p, f)
		}
	}
}

// TestRedisGroupedUnknownActivity: an error of the whole script reaches every caller in its batch.
func TestRedisGroupedUnknownActivity(t *testing.T) {
	srv := testsrv.StartRedis(t)
	s, _ := redisTestStore(t, srv.Addr, redisstore.Options{}, nil)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			_, err := s.Admit(context.Background(), admission.Request{Activity: "nope", User: fmt.Sprint("u", i), Qty: 1, RequestID: "r"})
			if !errors.Is(err, admission.ErrUnknownActivity) {
				t.Errorf("admit to an unknown activity: %v", err)
			}
		})
	}
	wg.Wait()
}

// redisEvalCalls returns how many EVALSHA and EVAL calls the server has run.
func redisEvalCalls(t testing.TB, raw *redis.Client) int64 {
	t.Helper()
	info, err := raw.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for line := range strings.SplitSeq(info, "\r\n") {
		for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if v, ok := strings.CutPrefix(line, cmd); ok {
				var n int64
				fmt.Sscan(strings.SplitN(v, ",", 2)[0], &n)
				total += n
			}
		}
	}
	return total
}

// TestRedisAdmitBatchOptions: a batch size the scripts cannot carry, or a negative one, is refused
// with ErrBadInput when the store is made, not by every script call of a busy sale; the bound
// itself is accepted.
func TestRedisAdmitBatchOptions(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = c.Close() })
	for _, o := range []redisstore.Options{
		{AdmitBatch: -1},
		{AdmitInFlight: -1},
		{AdmitBatch: redisstore.MaxAdmitBatch + 1},
	} {
		if _, err := redisstore.New(c, o); !errors.Is(err, admission.ErrBadInput) {
			t.Errorf("New(%+v): %v, want ErrBadInput", o, err)
		}
	}
	if _, err := redisstore.New(c, redisstore.Options{AdmitBatch: redisstore.MaxAdmitBatch}); err != nil {
		t.Errorf("New(AdmitBatch %d): %v", redisstore.MaxAdmitBatch, err)
	}
}
