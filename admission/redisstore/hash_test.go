package redisstore_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestRedisAdmitHashTables: a call with a win leaves :users, the hash every admission reads, a hash
// table (a listpack is searched linearly), holding only the users' fields, not the padding field
// that converts it; a refusal, a replay and a release keep it so.
func TestRedisAdmitHashTables(t *testing.T) {
	ctx := context.Background()
	srv := testsrv.StartRedis(t)
	s, raw := redisTestStore(t, srv.Addr, redisstore.Options{}, nil)
	redisDefine(t, s, redisOpen("ht", 10, 1))
	const users = "seckill:{ht}:users"
	check := func(when string, fields int) {
		t.Helper()
		if enc := raw.ObjectEncoding(ctx, users).Val(); enc != "hashtable" {
			t.Errorf("%s: %s is %q, want hashtable", when, users, enc)
		}
		keys, err := raw.HKeys(ctx, users).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) != fields {
			t.Errorf("%s: %s has %d fields %q, want %d", when, users, len(keys), keys, fields)
		}
		for _, f := range keys {
			if f == "" || f[0] == 0 {
				t.Errorf("%s: %s keeps the padding field (%d bytes)", when, users, len(f))
			}
		}
	}

	// A record written before any win (by SetResult) is kept as it was.
	if err := s.SetResult(ctx, "ht", "early", admission.Result{Code: "failed"}); err != nil {
		t.Fatal(err)
	}
	d := redisAdmit(t, s, "ht", "u1", "r1")
	if d.Outcome != admission.Won {
		t.Fatalf("u1: %+v", d)
	}
	check("after the first win", 1)
	if r, err := s.GetResult(ctx, "ht", "early"); err != nil || r.Code != "failed" {
		t.Errorf("early's record: %+v, %v", r, err)
	}
	if r, err := s.GetResult(ctx, "ht", "u1"); err != nil || r.Code != "queued" || r.ReservationID != d.ReservationID {
		t.Errorf("u1's record: %+v, %v", r, err)
	}

	// A refusal and a replay add no field.
	if d2 := redisAdmit(t, s, "ht", "u1", "r2"); d2.Outcome != admission.LimitReached {
		t.Fatalf("u1 again: %+v", d2)
	}
	if d2 := redisAdmit(t, s, "ht", "u1", "r1"); !d2.Replayed || d2.ReservationID != d.ReservationID {
		t.Fatalf("u1 replay: %+v", d2)
	}
	check("after a refusal and a replay", 1)

	// The last holder's release keeps their field (it holds their answers), at 0 items.
	if ok, err := s.Release(ctx, "ht", d.ReservationID); err != nil || !ok {
		t.Fatalf("release: %v, %v", ok, err)
	}
	if d := redisAdmit(t, s, "ht", "u2", "r1"); d.Outcome != admission.Won {
		t.Fatalf("u2: %+v", d)
	}
	check("after a release and another win", 2)
	if h, err := s.HeldRequests(ctx, "ht"); err != nil || len(h) != 1 || h[0] != "r1" {
		t.Errorf("held requests: %q, %v; want u2's r1 alone", h, err)
	}
}

// TestRedisHeldRequestsRepeatedField: HSCAN may return a field more than once (SCAN's contract,
// when the hash is rehashed between two steps), and HeldRequests lists each held win once all
// the same. Redis cannot be made to rehash at a chosen step, so a hook on the store's client
// repeats the first step's first field at the head of the second step, as Redis would.
func TestRedisHeldRequestsRepeatedField(t *testing.T) {
	ctx := context.Background()
	srv := testsrv.StartRedis(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: 3, DialTimeout: time.Second})
	hook := &repeatScanHook{}
	client.AddHook(hook)
	s, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	const wins = 700 // more than one step of 512 fields
	redisDefine(t, s, redisOpen("rep", wins, 1))
	want := make([]string, wins)
	for i := range want {
		want[i] = "req-" + strconv.Itoa(i)
		if d := redisAdmit(t, s, "rep", "u"+strconv.Itoa(i), want[i]); d.Outcome != admission.Won {
			t.Fatalf("win %d: %+v", i, d)
		}
	}
	got, err := s.HeldRequests(ctx, "rep")
	if err != nil {
		t.Fatal(err)
	}
	if steps, repeated := hook.result(); steps < 2 || repeated == "" {
		t.Fatalf("HSCAN took %d steps, repeated field %q: the test did not repeat a field", steps, repeated)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("held requests: %d ids, want the %d wins each once (a repeated field listed twice?)", len(got), len(want))
	}
}

// repeatScanHook repeats the first field HSCAN returned at the head of its second step's reply.
type repeatScanHook struct {
	mu       sync.Mutex
	steps    int
	repeated []string // field and value
}

func (h *repeatScanHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *repeatScanHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *repeatScanHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		sc, ok := cmd.(*redis.ScanCmd)
		if !ok || err != nil || cmd.Name() != "hscan" {
			return err
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		page, cursor := sc.Val()
		h.steps++
		switch {
		case h.steps == 1 && len(page) >= 2:
			h.repeated = slices.Clone(page[:2])
		case h.steps == 2 && h.repeated != nil:
			sc.SetVal(append(slices.Clone(h.repeated), page...), cursor)
		}
		return nil
	}
}

// result returns the HSCAN steps seen and the repeated field ("" when none was).
func (h *repeatScanHook) result() (int, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.repeated == nil {
		return h.steps, ""
	}
	return h.steps, h.repeated[0]
}
