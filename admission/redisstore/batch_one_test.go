package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestRedisOneBatch sends one script call (runAdmitBatch, as group admission does) holding what a
// batch must keep apart, so that each case is known to share the call rather than merely likely
// to (TestRedisGroupedAdmission): a request id repeated inside the batch replays the first answer
// and its qty without taking stock again, whatever qty the repeat asks, a qty above the limit is bad input for its request alone and writes
// nothing, and the stock is never oversold however many requests the batch holds.
func TestRedisOneBatch(t *testing.T) {
	ctx := context.Background()
	srv := testsrv.StartRedis(t)
	s, _ := guardRedisStore(t, srv.Addr, nil)
	now := time.Now()
	if _, err := s.Define(ctx, admission.Activity{ID: "b1", Stock: 3, Limit: 2, Start: now.Add(-time.Minute), End: now.Add(time.Hour), PayWithin: time.Minute}, false); err != nil {
		t.Fatal(err)
	}
	reqs := []admission.Request{
		{Activity: "b1", User: "u1", Qty: 2, RequestID: "r1"}, // 0: wins 2
		{Activity: "b1", User: "u1", Qty: 1, RequestID: "r1"}, // 1: replays 0, qty 2
		{Activity: "b1", User: "u2", Qty: 3, RequestID: "r2"}, // 2: above the limit
		{Activity: "b1", User: "u3", Qty: 1, RequestID: "r3"}, // 3: wins the last one
		{Activity: "b1", User: "u4", Qty: 1, RequestID: "r4"}, // 4: sold out
		{Activity: "b1", User: "u2", Qty: 1, RequestID: "r2"}, // 5: sold out, not a replay of 2
	}
	calls := make([]*admitCall, len(reqs))
	for i, r := range reqs {
		calls[i] = &admitCall{req: r, done: make(chan struct{}, 1)}
	}
	s.runAdmitBatches(ctx, []admitBatch{{activity: "b1", calls: calls}})
	ans := make([]admitAnswer, len(calls))
	for i, c := range calls {
		<-c.done
		ans[i] = c.answer
	}

	if a := ans[0]; a.err != nil || a.d.Outcome != admission.Won || a.d.Replayed || a.d.Remaining != 1 || a.d.Qty != 2 {
		t.Errorf("first request = %+v, %v; want won 2, 1 left", a.d, a.err)
	}
	if a := ans[1]; a.err != nil || a.d.Outcome != admission.Won || !a.d.Replayed || a.d.ReservationID != ans[0].d.ReservationID || a.d.Remaining != 1 || a.d.Qty != 2 {
		t.Errorf("repeated request id = %+v, %v; want the first answer %+v replayed, with its qty 2", a.d, a.err, ans[0].d)
	}
	if a := ans[2]; !errors.Is(a.err, admission.ErrBadInput) || a.d != (admission.Decision{}) {
		t.Errorf("qty above the limit = %+v, %v; want bad input", a.d, a.err)
	}
	if a := ans[3]; a.err != nil || a.d.Outcome != admission.Won || a.d.Remaining != 0 || a.d.Qty != 1 {
		t.Errorf("last item = %+v, %v; want won 1, 0 left", a.d, a.err)
	}
	for _, i := range []int{4, 5} {
		if a := ans[i]; a.err != nil || a.d.Outcome != admission.SoldOut || a.d.Replayed {
			t.Errorf("request %d = %+v, %v; want sold out", i, a.d, a.err)
		}
	}

	snap, err := s.Activity(ctx, "b1")
	if err != nil {
		t.Fatal(err)
	}
	if snap.Remaining != 0 || snap.Buyers != 2 || snap.Queued != 2 {
		t.Errorf("after the batch: %+v, want 0 left, 2 buyers (u1, u3), 2 queued wins", snap)
	}
	// The bad request wrote nothing for u2: no field in :users (no holding, no replayable
	// request id), no result.
	if n, err := s.client.HExists(ctx, s.key("b1", "users"), "u2").Result(); err != nil || n {
		t.Errorf("u2 has a :users field after bad input: %v, %v", n, err)
	}
	if _, err := s.GetResult(ctx, "b1", "u2"); !errors.Is(err, admission.ErrNotFound) {
		t.Errorf("u2's result after bad input: %v, want ErrNotFound", err)
	}
}
