// Package admissiontest is the conformance suite every admission.Store must pass. The memory and
// Redis stores run the same tests, so "identical semantics" is a checked claim, not a hope; a
// third implementation runs it with one call:
//
//	func TestConformance(t *testing.T) {
//		admissiontest.Run(t, func(t *testing.T) admission.Store { return newMyStore(t) })
//	}
package admissiontest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// NewStore returns a fresh store with no activities. The suite closes it.
type NewStore func(t *testing.T) admission.Store

// Run runs every conformance test against stores made by newStore.
func Run(t *testing.T, newStore NewStore) {
	tests := []struct {
		name string
		fn   func(*testing.T, admission.Store)
	}{
		{"DefineAndSnapshot", testDefineAndSnapshot},
		{"DefineIdempotent", testDefineIdempotent},
		{"RedefineRunning", testRedefineRunning},
		{"DefineBadInput", testDefineBadInput},
		{"Window", testWindow},
		{"UnknownActivity", testUnknownActivity},
		{"AdmitBadInput", testAdmitBadInput},
		{"Idempotent", testIdempotent},
		{"Replay", testReplay},
		{"ReplayQty", testReplayQty},
		{"ExactSellOut", testExactSellOut},
		{"ConcurrentLimitOne", testConcurrentLimitOne},
		{"ConcurrentMixedQty", testConcurrentMixedQty},
		{"ReleaseExactlyOnce", testReleaseExactlyOnce},
		{"RaiseStockRestocks", testRaiseStockRestocks},
		{"HeldRequests", testHeldRequests},
		{"HeldRequestsMany", testHeldRequestsMany},
		{"Results", testResults},
		{"ResultJSON", testResultJSON},
		{"ResultReservations", testResultReservations},
		{"Queue", testQueue},
		{"Delete", testDelete},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			t.Cleanup(func() { _ = s.Close() })
			tc.fn(t, s)
		})
	}
}

// open returns an activity whose window is open now.
func open(id string, stock, limit int64) admission.Activity {
	now := time.Now()
	return admission.Activity{
		ID: id, Stock: stock, Limit: limit,
		Start: now.Add(-time.Minute), End: now.Add(time.Hour), PayWithin: 15 * time.Minute,
	}
}

func snapshot(t *testing.T, s admission.Store, act string) admission.Snapshot {
	t.Helper()
	snap, err := s.Activity(context.Background(), act)
	if err != nil {
		t.Fatalf("activity %s: %v", act, err)
	}
	return snap
}

func testDefineAndSnapshot(t *testing.T, s admission.Store) {
	a := open("phone-1001", 100, 1)
	got := MustDefine(t, s, a)
	if got.Salt == "" {
		t.Error("define did not generate a salt")
	}
	if got.Stock != 100 || got.Limit != 1 || got.PayWithin != 15*time.Minute {
		t.Errorf("define returned %+v", got)
	}
	if got.Start.UnixMilli() != a.Start.UnixMilli() || got.End.UnixMilli() != a.End.UnixMilli() {
		t.Errorf("window %v..%v, want %v..%v", got.Start, got.End, a.Start, a.End)
	}
	snap := snapshot(t, s, a.ID)
	if snap.Salt != got.Salt || snap.Remaining != 100 || snap.Sold != 0 || snap.Buyers != 0 {
		t.Errorf("snapshot %+v", snap)
	}
	MustDefine(t, s, open("laptop-7", 5, 2))
	ids, err := s.Activities(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ids) != "[laptop-7 phone-1001]" {
		t.Errorf("activities = %v, want sorted [laptop-7 phone-1001]", ids)
	}
}

func testDefineIdempotent(t *testing.T, s admission.Store) {
	a := open("a1", 10, 1)
	first := MustDefine(t, s, a)
	MustAdmit(t, s, "a1", "u1", 1, "r1")
	// A reload redefines the same activity (salt not given): nothing changes, stock is kept.
	again := MustDefine(t, s, a)
	if again.Salt != first.Salt {
		t.Errorf("identical redefinition changed the salt")
	}
	if n := MustRemaining(t, s, "a1"); n != 9 {
		t.Errorf("remaining after identical redefinition = %d, want 9", n)
	}
	// With the stored salt given explicitly, still identical.
	a.Salt = first.Salt
	MustDefine(t, s, a)
	if n := MustRemaining(t, s, "a1"); n != 9 {
		t.Errorf("remaining = %d, want 9", n)
	}
}

func testRedefineRunning(t *testing.T, s admission.Store) {
	ctx := context.Background()
	a := open("a1", 10, 2)
	first := MustDefine(t, s, a)
	MustAdmit(t, s, "a1", "u1", 2, "r1")
	MustAdmit(t, s, "a1", "u2", 1, "r2")

	changed := a
	changed.Stock = 20
	if _, err := s.Define(ctx, changed, false); !errors.Is(err, admission.ErrActivityRunning) {
		t.Fatalf("unforced redefinition of a running activity: err = %v, want ErrActivityRunning", err)
	}
	if n := MustRemaining(t, s, "a1"); n != 7 {
		t.Fatalf("refused redefinition changed remaining to %d", n)
	}
	got, err := s.Define(ctx, changed, true)
	if err != nil {
		t.Fatalf("forced redefinition: %v", err)
	}
	if got.Salt != first.Salt || got.Stock != 20 {
		t.Errorf("forced redefinition returned %+v", got)
	}
	// Sold items stay sold: remaining moves by the difference of totals.
	if n := MustRemaining(t, s, "a1"); n != 17 {
		t.Errorf("remaining after +10 = %d, want 17", n)
	}
	shrunk := changed
	shrunk.Stock = 2 // 3 already sold
	if _, err := s.Define(ctx, shrunk, true); !errors.Is(err, admission.ErrStockBelowSold) {
		t.Errorf("stock below sold: err = %v, want ErrStockBelowSold", err)
	}
	shrunk.Stock = 3
	if _, err := s.Define(ctx, shrunk, true); err != nil {
		t.Fatalf("stock equal to sold: %v", err)
	}
	if n := MustRemaining(t, s, "a1"); n != 0 {
		t.Errorf("remaining = %d, want 0", n)
	}
	if d := MustAdmit(t, s, "a1", "u3", 1, "r3"); d.Outcome != admission.SoldOut {
		t.Errorf("admit after shrink = %v, want sold_out", d.Outcome)
	}
	// A lower per-user limit, forced: u1 keeps its 2 items and is refused a third, once stock
	// is back.
	lower := shrunk
	lower.Stock, lower.Limit = 10, 1
	if _, err := s.Define(ctx, lower, true); err != nil {
		t.Fatalf("forced lower limit: %v", err)
	}
	if d := MustAdmit(t, s, "a1", "u1", 1, "r4"); d.Outcome != admission.LimitReached {
		t.Errorf("admit above the lowered limit = %v, want limit_reached", d.Outcome)
	}
	if d := MustAdmit(t, s, "a1", "u4", 1, "r1"); d.Outcome != admission.Won {
		t.Errorf("admit of a new buyer under the lowered limit = %v, want won", d.Outcome)
	}

	// An activity that has not started may be redefined freely.
	later := open("a2", 5, 1)
	later.Start = time.Now().Add(time.Hour)
	later.End = time.Now().Add(2 * time.Hour)
	MustDefine(t, s, later)
	later.Stock = 50
	if _, err := s.Define(ctx, later, false); err != nil {
		t.Fatalf("redefining an upcoming activity: %v", err)
	}
	if n := MustRemaining(t, s, "a2"); n != 50 {
		t.Errorf("remaining = %d, want 50", n)
	}
}

func testDefineBadInput(t *testing.T, s admission.Store) {
	ctx := context.Background()
	good := open("ok", 10, 1)
	mutate := map[string]func(*admission.Activity){
		"empty id":       func(a *admission.Activity) { a.ID = "" },
		"brace in id":    func(a *admission.Activity) { a.ID = "a}b" },
		"colon in id":    func(a *admission.Activity) { a.ID = "a:b" },
		"long id":        func(a *admission.Activity) { a.ID = string(make([]byte, 65)) },
		"negative stock": func(a *admission.Activity) { a.Stock = -1 },
		"zero limit":     func(a *admission.Activity) { a.Limit = 0 },
		"no start":       func(a *admission.Activity) { a.Start = time.Time{} },
		"end = start":    func(a *admission.Activity) { a.End = a.Start },
		// Stores keep milliseconds: a window inside one millisecond would be stored empty.
		"window under 1ms": func(a *admission.Activity) {
			a.Start = time.UnixMilli(a.Start.UnixMilli()).Add(100 * time.Microsecond)
			a.End = a.Start.Add(800 * time.Microsecond)
		},
		"negative pay": func(a *admission.Activity) { a.PayWithin = -time.Second },
	}
	for name, m := range mutate {
		a := good
		m(&a)
		if _, err := s.Define(ctx, a, true); !errors.Is(err, admission.ErrBadInput) {
			t.Errorf("%s: err = %v, want ErrBadInput", name, err)
		}
	}
	ids, err := s.Activities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 0 {
		t.Errorf("bad definitions created %v", ids)
	}
}

func testWindow(t *testing.T, s admission.Store) {
	now := time.Now()
	up := open("upcoming", 10, 1)
	up.Start, up.End = now.Add(time.Hour), now.Add(2*time.Hour)
	MustDefine(t, s, up)
	past := open("past", 10, 1)
	past.Start, past.End = now.Add(-2*time.Hour), now.Add(-time.Hour)
	MustDefine(t, s, past)

	if d := MustAdmit(t, s, "upcoming", "u1", 1, "r1"); d.Outcome != admission.NotStarted {
		t.Errorf("upcoming: %v, want not_started", d.Outcome)
	}
	if d := MustAdmit(t, s, "past", "u1", 1, "r1"); d.Outcome != admission.Ended {
		t.Errorf("past: %v, want ended", d.Outcome)
	}
	for _, id := range []string{"upcoming", "past"} {
		snap := snapshot(t, s, id)
		if snap.Remaining != 10 || snap.Buyers != 0 || snap.Queued != 0 {
			t.Errorf("%s: a rejected admission wrote something: %+v", id, snap)
		}
	}
}

func testUnknownActivity(t *testing.T, s admission.Store) {
	ctx := context.Background()
	_, err := s.Admit(ctx, admission.Request{Activity: "nope", User: "u", Qty: 1, RequestID: "r"})
	if !errors.Is(err, admission.ErrUnknownActivity) {
		t.Errorf("admit: err = %v, want ErrUnknownActivity", err)
	}
	if _, err := s.Remaining(ctx, "nope"); !errors.Is(err, admission.ErrUnknownActivity) {
		t.Errorf("remaining: err = %v, want ErrUnknownActivity", err)
	}
	if _, err := s.Activity(ctx, "nope"); !errors.Is(err, admission.ErrUnknownActivity) {
		t.Errorf("activity: err = %v, want ErrUnknownActivity", err)
	}
	if _, err := s.Release(ctx, "nope", "1-0"); !errors.Is(err, admission.ErrUnknownActivity) && !errors.Is(err, admission.ErrNotFound) {
		t.Errorf("release: err = %v, want ErrUnknownActivity or ErrNotFound", err)
	}
}

func testAdmitBadInput(t *testing.T, s admission.Store) {
	ctx := context.Background()
	MustDefine(t, s, open("a1", 10, 2))
	bad := map[string]admission.Request{
		"empty user":       {Activity: "a1", User: "", Qty: 1, RequestID: "r"},
		"empty request id": {Activity: "a1", User: "u", Qty: 1, RequestID: ""},
		"zero qty":         {Activity: "a1", User: "u", Qty: 0, RequestID: "r"},
		"negative qty":     {Activity: "a1", User: "u", Qty: -1, RequestID: "r"},
		"qty above limit":  {Activity: "a1", User: "u", Qty: 3, RequestID: "r"},
		"bad activity id":  {Activity: "a{1}", User: "u", Qty: 1, RequestID: "r"},
		"huge user":        {Activity: "a1", User: string(make([]byte, admission.MaxUserIDLen+1)), Qty: 1, RequestID: "r"},
		"huge request id":  {Activity: "a1", User: "u", Qty: 1, RequestID: string(make([]byte, admission.MaxRequestIDLen+1))},
	}
	for name, r := range bad {
		if d, err := s.Admit(ctx, r); !errors.Is(err, admission.ErrBadInput) {
			t.Errorf("%s: decision %+v, err = %v, want ErrBadInput", name, d, err)
		}
	}
	snap := snapshot(t, s, "a1")
	if snap.Remaining != 10 || snap.Buyers != 0 || snap.Queued != 0 {
		t.Errorf("bad input wrote something: %+v", snap)
	}
}

func testIdempotent(t *testing.T, s admission.Store) {
	MustDefine(t, s, open("a1", 10, 2))
	first := MustAdmit(t, s, "a1", "u1", 1, "req-1")
	if first.Outcome != admission.Won || first.ReservationID == "" || first.Remaining != 9 || first.Replayed || first.Qty != 1 {
		t.Fatalf("first admission = %+v", first)
	}
	again := MustAdmit(t, s, "a1", "u1", 1, "req-1")
	if again.Outcome != admission.Won || again.ReservationID != first.ReservationID || !again.Replayed || again.Qty != 1 {
		t.Errorf("repeat = %+v, want the first answer replayed", again)
	}
	if again.Remaining != first.Remaining {
		t.Errorf("replayed remaining = %d, want the first answer's %d", again.Remaining, first.Remaining)
	}
	// The same request id from another user is that user's own request.
	other := MustAdmit(t, s, "a1", "u2", 1, "req-1")
	if other.Outcome != admission.Won || other.ReservationID == first.ReservationID || other.Replayed {
		t.Errorf("other user's request = %+v", other)
	}
	// A new request id of the same user is a new purchase.
	second := MustAdmit(t, s, "a1", "u1", 1, "req-2")
	if second.Outcome != admission.Won || second.ReservationID == first.ReservationID {
		t.Errorf("second purchase = %+v", second)
	}
	if n := MustRemaining(t, s, "a1"); n != 7 {
		t.Errorf("remaining = %d, want 7", n)
	}
	if d := MustAdmit(t, s, "a1", "u1", 1, "req-3"); d.Outcome != admission.LimitReached {
		t.Errorf("third purchase with limit 2 = %v, want limit_reached", d.Outcome)
	}
	// Replays still answer after the limit is reached and after the sell-out.
	if d := MustAdmit(t, s, "a1", "u1", 1, "req-1"); d.ReservationID != first.ReservationID {
		t.Errorf("replay after limit = %+v", d)
	}
}

// testReplay: Replay answers exactly what Admit's replay of the same user and request id would
// (each of a user's wins, after the sell-out, after a release, after the window), and a request
// id that won nothing is ErrNotFound: Replay never decides, and writes nothing.
func testReplay(t *testing.T, s admission.Store) {
	ctx := context.Background()
	MustDefine(t, s, open("a1", 3, 2))
	replay := func(user, req string) (admission.Decision, error) { return s.Replay(ctx, "a1", user, req) }
	wantNotFound := func(what, user, req string) {
		t.Helper()
		if d, err := replay(user, req); !errors.Is(err, admission.ErrNotFound) {
			t.Errorf("%s: replay %s/%s = %+v, %v; want ErrNotFound", what, user, req, d, err)
		}
	}
	// Admit's replay of the same request (a client's key: past a Guard's sold-out flag), then
	// Replay: the same answer.
	same := func(what, user, req string, first admission.Decision) {
		t.Helper()
		// Another qty than the win's (1): the replay carries the won one.
		want, err := s.Admit(ctx, admission.Request{Activity: "a1", User: user, Qty: 2, RequestID: req, MayReplay: true})
		if err != nil {
			t.Fatalf("%s: admit %s/%s: %v", what, user, req, err)
		}
		got, err := replay(user, req)
		if err != nil || got != want || !got.Replayed || got.ReservationID != first.ReservationID || got.Remaining != first.Remaining || got.Qty != first.Qty {
			t.Errorf("%s: replay %s/%s = %+v, %v; want %+v, Admit's replay of the first answer %+v", what, user, req, got, err, want, first)
		}
	}

	wantNotFound("before any win", "u1", "req-1")
	if snap := snapshot(t, s, "a1"); snap.Remaining != 3 || snap.Buyers != 0 || snap.Queued != 0 {
		t.Fatalf("a replay of nothing wrote something: %+v", snap)
	}
	w1 := MustAdmit(t, s, "a1", "u1", 1, "req-1")
	w2 := MustAdmit(t, s, "a1", "u1", 1, "req-2")
	if w1.Outcome != admission.Won || w2.Outcome != admission.Won {
		t.Fatalf("u1's wins = %+v, %+v", w1, w2)
	}
	same("a user's first win", "u1", "req-1", w1)
	same("a user's second win", "u1", "req-2", w2)
	wantNotFound("a request id the user did not win with", "u1", "req-3")
	wantNotFound("another user's request id", "u2", "req-1")

	w3 := MustAdmit(t, s, "a1", "u2", 1, "x")
	if w3.Outcome != admission.Won || w3.Remaining != 0 {
		t.Fatalf("the last item = %+v", w3)
	}
	same("the win that sold out", "u2", "x", w3)
	same("after the sell-out", "u1", "req-1", w1)
	wantNotFound("a new request id after the sell-out", "u2", "y")

	if ok, err := s.Release(ctx, "a1", w1.ReservationID); err != nil || !ok {
		t.Fatalf("release %s = %v, %v", w1.ReservationID, ok, err)
	}
	same("a released win", "u1", "req-1", w1)
	wantNotFound("a new request id with stock back", "u3", "z")
	if snap := snapshot(t, s, "a1"); snap.Remaining != 1 || snap.Queued != 3 {
		t.Errorf("after the replays: %+v; want 1 left, 3 wins queued", snap)
	}

	// After the window the wins still replay; nothing new is decided.
	now := time.Now()
	ended := open("a1", 3, 2)
	ended.Start, ended.End = now.Add(-2*time.Hour), now.Add(-time.Hour)
	if _, err := s.Define(ctx, ended, true); err != nil {
		t.Fatalf("end the window: %v", err)
	}
	same("after the end", "u2", "x", w3)
	wantNotFound("a new request id after the end", "u3", "z")

	if _, err := s.Replay(ctx, "nope", "u1", "req-1"); !errors.Is(err, admission.ErrUnknownActivity) {
		t.Errorf("replay on an unknown activity: %v, want ErrUnknownActivity", err)
	}
	for name, args := range map[string][3]string{
		"bad activity id":  {"a{1}", "u1", "req-1"},
		"empty user":       {"a1", "", "req-1"},
		"empty request id": {"a1", "u1", ""},
		"huge user":        {"a1", string(make([]byte, admission.MaxUserIDLen+1)), "req-1"},
		"huge request id":  {"a1", "u1", string(make([]byte, admission.MaxRequestIDLen+1))},
	} {
		if d, err := s.Replay(ctx, args[0], args[1], args[2]); !errors.Is(err, admission.ErrBadInput) {
			t.Errorf("replay, %s: %+v, %v; want ErrBadInput", name, d, err)
		}
	}
}

// testReplayQty: a win's decision carries its qty, and a repeat of its request id, by Admit or
// Replay, carries the qty that was won whatever qty the repeat asks for (more, fewer, above
// what is left), and takes nothing: the edge signs that qty for the shop.
func testReplayQty(t *testing.T, s admission.Store) {
	ctx := context.Background()
	MustDefine(t, s, open("a1", 6, 5))
	w1 := MustAdmit(t, s, "a1", "u1", 1, "one")
	w3 := MustAdmit(t, s, "a1", "u2", 3, "three")
	if w1.Outcome != admission.Won || w1.Qty != 1 || w3.Outcome != admission.Won || w3.Qty != 3 || w3.Remaining != 2 {
		t.Fatalf("wins of 1 and 3 = %+v, %+v", w1, w3)
	}
	for _, c := range []struct {
		user, req string
		won       admission.Decision
		qty       int64
	}{
		{"u1", "one", w1, 4}, // more than won, and than is left
		{"u1", "one", w1, 1},
		{"u2", "three", w3, 1}, // fewer than won
		{"u2", "three", w3, 2},
	} {
		d := MustAdmit(t, s, "a1", c.user, c.qty, c.req)
		if !d.Replayed || d.ReservationID != c.won.ReservationID || d.Remaining != c.won.Remaining || d.Qty != c.won.Qty {
			t.Errorf("%s/%s repeated with qty %d = %+v; want the win %+v replayed, qty %d", c.user, c.req, c.qty, d, c.won, c.won.Qty)
		}
		r, err := s.Replay(ctx, "a1", c.user, c.req)
		if err != nil || r != d {
			t.Errorf("Replay %s/%s = %+v, %v; want Admit's replay %+v", c.user, c.req, r, err, d)
		}
	}
	if snap := snapshot(t, s, "a1"); snap.Remaining != 2 || snap.Queued != 2 {
		t.Errorf("after the repeats: %+v; want 2 left, 2 wins queued", snap)
	}
}

func testExactSellOut(t *testing.T, s admission.Store) {
	MustDefine(t, s, open("a1", 3, 2))
	if d := MustAdmit(t, s, "a1", "u1", 2, "r"); d.Outcome != admission.Won || d.Remaining != 1 {
		t.Fatalf("qty 2 of 3 = %+v", d)
	}
	if d := MustAdmit(t, s, "a1", "u2", 2, "r"); d.Outcome != admission.SoldOut || d.Remaining != 1 {
		t.Errorf("qty 2 of 1 = %+v, want sold_out with 1 remaining", d)
	}
	if d := MustAdmit(t, s, "a1", "u2", 1, "r2"); d.Outcome != admission.Won || d.Remaining != 0 {
		t.Errorf("qty 1 of 1 = %+v, want won with 0 remaining", d)
	}
	if d := MustAdmit(t, s, "a1", "u3", 1, "r"); d.Outcome != admission.SoldOut || d.Remaining != 0 {
		t.Errorf("after sell-out = %+v", d)
	}
	snap := snapshot(t, s, "a1")
	if snap.Sold != 3 || snap.Buyers != 2 || snap.Queued != 2 {
		t.Errorf("snapshot %+v", snap)
	}
}

// testConcurrentLimitOne is the classic: 1,000 buyers, 5 presses each, 100 items, limit 1.
func testConcurrentLimitOne(t *testing.T, s admission.Store) {
	const users, attempts, stock = 1000, 5, 100
	MustDefine(t, s, open("rush", stock, 1))
	var (
		mu      sync.Mutex
		winners = map[string]string{} // user -> reservation
		resv    = map[string]bool{}
		errs    atomic.Int64
		wg      sync.WaitGroup
	)
	for u := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			user := fmt.Sprintf("user-%d", u)
			for a := range attempts {
				d, err := s.Admit(context.Background(), admission.Request{
					Activity: "rush", User: user, Qty: 1, RequestID: fmt.Sprintf("%s-%d", user, a),
				})
				if err != nil {
					errs.Add(1)
					continue
				}
				if d.Outcome == admission.Won {
					mu.Lock()
					if prev, ok := winners[user]; ok {
						t.Errorf("%s won twice: %s and %s", user, prev, d.ReservationID)
					}
					if resv[d.ReservationID] {
						t.Errorf("reservation %s handed out twice", d.ReservationID)
					}
					winners[user], resv[d.ReservationID] = d.ReservationID, true
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if errs.Load() != 0 {
		t.Fatalf("%d admissions failed with an error", errs.Load())
	}
	if len(winners) != stock {
		t.Errorf("%d winners, want exactly %d", len(winners), stock)
	}
	if n := MustRemaining(t, s, "rush"); n != 0 {
		t.Errorf("remaining = %d, want 0", n)
	}
	snap := snapshot(t, s, "rush")
	if snap.Buyers != stock || snap.Queued != stock || snap.Sold != stock {
		t.Errorf("snapshot %+v", snap)
	}
	queued := readAll(t, s, "rush")
	if len(queued) != stock {
		t.Fatalf("queue holds %d wins, want %d", len(queued), stock)
	}
	for _, w := range queued {
		if winners[w.User] != w.ReservationID || w.Qty != 1 {
			t.Errorf("queued win %+v does not match the answer given to its user (%q)", w, winners[w.User])
		}
	}
}

// testConcurrentMixedQty buys 1-3 items at a time with limit 3: nobody above the limit, no oversell,
// and the queue holds exactly the answers given.
func testConcurrentMixedQty(t *testing.T, s admission.Store) {
	const users, attempts, stock = 200, 4, 150
	MustDefine(t, s, open("mixed", stock, 3))
	var (
		mu   sync.Mutex
		held = map[string]int64{}
		sold int64
		wg   sync.WaitGroup
	)
	for u := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(u), 7))
			user := fmt.Sprintf("user-%d", u)
			for a := range attempts {
				qty := 1 + rng.Int64N(3)
				d, err := s.Admit(context.Background(), admission.Request{
					Activity: "mixed", User: user, Qty: qty, RequestID: fmt.Sprintf("%d", a),
				})
				if err != nil {
					t.Errorf("admit: %v", err)
					return
				}
				if d.Outcome == admission.Won {
					mu.Lock()
					held[user] += qty
					sold += qty
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for user, n := range held {
		if n > 3 {
			t.Errorf("%s holds %d items, limit 3", user, n)
		}
	}
	if sold > stock {
		t.Fatalf("oversold: %d of %d", sold, stock)
	}
	if n := MustRemaining(t, s, "mixed"); n != stock-sold {
		t.Errorf("remaining = %d, want %d", n, stock-sold)
	}
	var queuedQty int64
	for _, w := range readAll(t, s, "mixed") {
		queuedQty += w.Qty
	}
	if queuedQty != sold {
		t.Errorf("queue holds %d items, answers gave %d", queuedQty, sold)
	}
}

func testReleaseExactlyOnce(t *testing.T, s admission.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	restocks, err := s.Restocks(ctx)
	if err != nil {
		t.Fatalf("restocks: %v", err)
	}
	MustDefine(t, s, open("a1", 1, 1))
	won := MustAdmit(t, s, "a1", "u1", 1, "r1")
	if won.Outcome != admission.Won {
		t.Fatalf("admit = %+v", won)
	}
	if d := MustAdmit(t, s, "a1", "u2", 1, "r1"); d.Outcome != admission.SoldOut {
		t.Fatalf("second buyer = %v, want sold_out", d.Outcome)
	}
	var (
		wg       sync.WaitGroup
		released atomic.Int64
	)
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := s.Release(ctx, "a1", won.ReservationID)
			if err != nil {
				t.Errorf("release: %v", err)
			}
			if ok {
				released.Add(1)
			}
		}()
	}
	wg.Wait()
	if released.Load() != 1 {
		t.Errorf("%d releases reported success, want exactly 1", released.Load())
	}
	if n := MustRemaining(t, s, "a1"); n != 1 {
		t.Errorf("remaining after release = %d, want 1", n)
	}
	select {
	case id := <-restocks:
		if id != "a1" {
			t.Errorf("restock for %q, want a1", id)
		}
	case <-time.After(5 * time.Second):
		t.Error("no restock broadcast after a release")
	}
	// The user gave the item back, so the limit allows buying again.
	if d := MustAdmit(t, s, "a1", "u1", 1, "r2"); d.Outcome != admission.Won {
		t.Errorf("buy again after release = %v, want queued", d.Outcome)
	}
	if _, err := s.Release(ctx, "a1", "999-0"); !errors.Is(err, admission.ErrNotFound) {
		t.Errorf("release unknown reservation: err = %v, want ErrNotFound", err)
	}
	if n := MustRemaining(t, s, "a1"); n != 0 {
		t.Errorf("remaining = %d, want 0", n)
	}
}

// checkHeld checks that act's HeldRequests are the ids want (each once, in any order). A list
// may repeat an id that two users won with, but never holds more than the held wins, wins.
func checkHeld(t *testing.T, s admission.Catalog, act, what string, wins int, want ...string) {
	t.Helper()
	ids, err := s.HeldRequests(context.Background(), act)
	if err != nil {
		t.Fatalf("held requests %s: %v", what, err)
	}
	got := slices.Compact(slices.Sorted(slices.Values(ids)))
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(got, want) || len(ids) > wins {
		t.Errorf("held requests %s = %q, want %q (%d held wins)", what, ids, want, wins)
	}
}

// testHeldRequests checks that HeldRequests lists exactly the request ids of the wins not
// released: a user's second win beside the first, nothing for a replay or a refusal, a released
// win's id gone (also while its user holds another win, or won again after it), and an id two
// users won with kept while either win is held.
func testHeldRequests(t *testing.T, s admission.Store) {
	ctx := context.Background()
	MustDefine(t, s, open("a1", 6, 2))
	checkHeld(t, s, "a1", "before any win", 0)
	resv := map[string]string{}
	win := func(user string, qty int64, req string) {
		t.Helper()
		d := MustAdmit(t, s, "a1", user, qty, req)
		if d.Outcome != admission.Won || d.Replayed {
			t.Fatalf("admit %s/%s = %+v; want a new win", user, req, d)
		}
		resv[user+"/"+req] = d.ReservationID
	}
	release := func(k string) {
		t.Helper()
		if ok, err := s.Release(ctx, "a1", resv[k]); !ok || err != nil {
			t.Fatalf("release %s = %v, %v", k, ok, err)
		}
	}
	win("u1", 2, "k1")
	win("u2", 1, "k1") // the same id, another user's
	win("u3", 1, "k3")
	win("u4", 1, "k4a")
	win("u4", 1, "k4b")
	checkHeld(t, s, "a1", "after the sell-out", 5, "k1", "k3", "k4a", "k4b")

	// Keyed, so that a Guard's sold-out flag lets the replay through.
	replay := admission.Request{Activity: "a1", User: "u1", Qty: 2, RequestID: "k1", MayReplay: true}
	if d, err := s.Admit(ctx, replay); err != nil || !d.Replayed {
		t.Fatalf("replay of u1/k1 = %+v, %v", d, err)
	}
	if d := MustAdmit(t, s, "a1", "u5", 1, "k5"); d.Outcome != admission.SoldOut {
		t.Fatalf("admit after the sell-out = %+v", d)
	}
	if d := MustAdmit(t, s, "a1", "u4", 1, "k4c"); d.Outcome == admission.Won {
		t.Fatalf("u4's third buy = %+v; want a refusal", d) // limit_reached, or a Guard's sold_out
	}
	checkHeld(t, s, "a1", "after a replay and refusals", 5, "k1", "k3", "k4a", "k4b")

	release("u3/k3")  // u3 holds nothing now
	release("u4/k4b") // u4 still holds k4a
	checkHeld(t, s, "a1", "after two releases", 3, "k1", "k4a")

	win("u3", 1, "k3b") // a second win, after a released one
	checkHeld(t, s, "a1", "after a win after a release", 4, "k1", "k3b", "k4a")

	release("u1/k1")
	checkHeld(t, s, "a1", "after one of two k1 wins released", 3, "k1", "k3b", "k4a")
	release("u2/k1")
	checkHeld(t, s, "a1", "after both k1 wins released", 2, "k3b", "k4a")

	if _, err := s.HeldRequests(ctx, "nope"); !errors.Is(err, admission.ErrUnknownActivity) {
		t.Errorf("held requests of an unknown activity: err = %v, want ErrUnknownActivity", err)
	}
	if _, err := s.HeldRequests(ctx, "a{1}"); !errors.Is(err, admission.ErrBadInput) {
		t.Errorf("held requests with a bad activity id: err = %v, want ErrBadInput", err)
	}
}

// testHeldRequestsMany is testHeldRequests at a size a store reads in several steps (Redis scans
// its users 512 at a time): 1,200 buyers, one in five with a second win, some wins released.
func testHeldRequestsMany(t *testing.T, s admission.Store) {
	ctx := context.Background()
	const users = 1200
	MustDefine(t, s, open("many", 2*users, 2))
	var want []string
	for i := range users {
		reqs := []string{fmt.Sprintf("m%d", i)}
		if i%5 == 0 {
			reqs = append(reqs, fmt.Sprintf("m%dx", i))
		}
		for j, req := range reqs {
			d := MustAdmit(t, s, "many", fmt.Sprintf("user%d", i), 1, req)
			if d.Outcome != admission.Won {
				t.Fatalf("admit user%d/%s = %+v", i, req, d)
			}
			// Release the first of two wins of every tenth buyer, the one win of every seventh.
			if (j == 0 && i%10 == 0) || (len(reqs) == 1 && i%7 == 0) {
				if ok, err := s.Release(ctx, "many", d.ReservationID); !ok || err != nil {
					t.Fatalf("release user%d/%s = %v, %v", i, req, ok, err)
				}
				continue
			}
			want = append(want, req)
		}
	}
	checkHeld(t, s, "many", "of 1,200 buyers", len(want), want...)
}

func testResults(t *testing.T, s admission.Store) {
	ctx := context.Background()
	MustDefine(t, s, open("a1", 5, 1))
	if _, err := s.GetResult(ctx, "a1", "u1"); !errors.Is(err, admission.ErrNotFound) {
		t.Errorf("no result yet: err = %v, want ErrNotFound", err)
	}
	d := MustAdmit(t, s, "a1", "u1", 1, "r1")
	r, err := s.GetResult(ctx, "a1", "u1")
	if err != nil {
		t.Fatal(err)
	}
	if r.Code != "queued" || r.ReservationID != d.ReservationID {
		t.Errorf("result after win = %+v", r)
	}
	want := admission.Result{Code: "pending_payment", ReservationID: d.ReservationID, OrderID: "o-1", PayBeforeMS: 12345}
	if err := s.SetResult(ctx, "a1", "u1", want); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.GetResult(ctx, "a1", "u1"); !r.Equal(want) {
		t.Errorf("result = %+v, want %+v", r, want)
	}
	if err := s.SetResult(ctx, "missing", "u1", want); !errors.Is(err, admission.ErrUnknownActivity) {
		t.Errorf("result for unknown activity: err = %v, want ErrUnknownActivity", err)
	}
}

// testResultJSON checks AppendResult against encoding/json: the poll's answer must be the
// record's json.Marshal encoding, byte for byte, whatever the record holds, appended after what
// dst already holds.
func testResultJSON(t *testing.T, s admission.Store) {
	ctx := context.Background()
	MustDefine(t, s, open("a1", 5, 1))
	appendResult := func(user string) ([]byte, string, error) {
		t.Helper()
		return s.AppendResult(ctx, []byte("prefix:"), "a1", user)
	}
	check := func(what, user string, want admission.Result) {
		t.Helper()
		got, code, err := appendResult(user)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		enc, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != "prefix:"+string(enc) || code != want.Code {
			t.Errorf("%s: appended %q with code %q, want %q with code %q", what, got, code, "prefix:"+string(enc), want.Code)
		}
		if r, err := s.GetResult(ctx, "a1", user); err != nil || !r.Equal(want) {
			t.Errorf("%s: GetResult = %+v, %v; want %+v", what, r, err, want)
		}
	}

	if got, _, err := appendResult("u1"); !errors.Is(err, admission.ErrNotFound) || string(got) != "prefix:" {
		t.Errorf("no result yet: %q, err = %v, want the prefix and ErrNotFound", got, err)
	}
	if _, _, err := s.AppendResult(ctx, nil, "missing", "u1"); !errors.Is(err, admission.ErrNotFound) && !errors.Is(err, admission.ErrUnknownActivity) {
		t.Errorf("unknown activity: err = %v, want ErrNotFound or ErrUnknownActivity", err)
	}
	if _, _, err := s.AppendResult(ctx, nil, "a1", ""); !errors.Is(err, admission.ErrBadInput) {
		t.Errorf("empty user: err = %v, want ErrBadInput", err)
	}
	d := MustAdmit(t, s, "a1", "u1", 1, "r1")
	check("after a win", "u1", admission.Result{Code: "queued", ReservationID: d.ReservationID})
	for i, r := range []admission.Result{
		{Code: "pending_payment", ReservationID: d.ReservationID, OrderID: "o-1", PayBeforeMS: 1764441234567},
		{Code: "paid", ReservationID: d.ReservationID, OrderID: "o-1"},
		{Code: "cancelled", OrderID: "o-1", PayBeforeMS: -5},
		{Code: "failed"},
		{Code: "none"},
		// Characters encoding/json escapes, and a number beyond 18 digits. (Not invalid UTF-8:
		// the memory store keeps such a string as it is, the Redis store as U+FFFD.)
		{Code: "paid", ReservationID: `r"1\`, OrderID: "<o&1>\u2028\x01é", PayBeforeMS: 1 << 62},
	} {
		if err := s.SetResult(ctx, "a1", "u1", r); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("after SetResult #%d", i), "u1", r)
	}
}

// testResultReservations: a user with several reservations finds the record of each in the
// latest record's Reservations, oldest first, while the latest stays the newest win in flight; a
// user with one reservation gets the record as before, without the list.
func testResultReservations(t *testing.T, s admission.Store) {
	ctx := context.Background()
	MustDefine(t, s, open("a1", 50, 40))
	check := func(what, user string, want admission.Result) {
		t.Helper()
		r, err := s.GetResult(ctx, "a1", user)
		if err != nil || !r.Equal(want) {
			t.Fatalf("%s: GetResult = %+v, %v\nwant %+v", what, r, err, want)
		}
		got, code, err := s.AppendResult(ctx, nil, "a1", user)
		enc, _ := json.Marshal(want)
		if err != nil || string(got) != string(enc) || code != want.Code {
			t.Fatalf("%s: AppendResult = %s, %q, %v\nwant %s", what, got, code, err, enc)
		}
	}
	set := func(user string, r admission.Result) {
		t.Helper()
		if err := s.SetResult(ctx, "a1", user, r); err != nil {
			t.Fatal(err)
		}
	}
	type R = admission.Result

	d1 := MustAdmit(t, s, "a1", "u1", 1, "r1")
	q1 := R{Code: "queued", ReservationID: d1.ReservationID}
	check("one reservation", "u1", q1)
	set("u1", R{Code: "pending_payment", ReservationID: d1.ReservationID, OrderID: "o-1", PayBeforeMS: 1764441234567})
	p1 := R{Code: "pending_payment", ReservationID: d1.ReservationID, OrderID: "o-1", PayBeforeMS: 1764441234567}
	check("one reservation, its order", "u1", p1)

	d2 := MustAdmit(t, s, "a1", "u1", 2, "r2")
	q2 := R{Code: "queued", ReservationID: d2.ReservationID}
	check("a second win", "u1", R{Code: "queued", ReservationID: d2.ReservationID, Reservations: []R{p1, q2}})
	paid1 := R{Code: "paid", ReservationID: d1.ReservationID, OrderID: "o-1"}
	set("u1", paid1)
	check("the first paid, the second in flight", "u1", R{Code: "queued", ReservationID: d2.ReservationID, Reservations: []R{paid1, q2}})
	p2 := R{Code: "pending_payment", ReservationID: d2.ReservationID, OrderID: "o-2", PayBeforeMS: 1764441299999}
	set("u1", p2)
	check("the second's order", "u1", R{Code: p2.Code, ReservationID: p2.ReservationID, OrderID: p2.OrderID, PayBeforeMS: p2.PayBeforeMS, Reservations: []R{paid1, p2}})
	d3 := MustAdmit(t, s, "a1", "u1", 1, "r3")
	q3 := R{Code: "queued", ReservationID: d3.ReservationID}
	c2 := R{Code: "cancelled", ReservationID: d2.ReservationID, OrderID: "o-2"}
	set("u1", c2)
	check("a third win, the second cancelled", "u1", R{Code: "queued", ReservationID: d3.ReservationID, Reservations: []R{paid1, c2, q3}})
	// A replayed admission adds nothing.
	if d := MustAdmit(t, s, "a1", "u1", 2, "r2"); !d.Replayed || d.ReservationID != d2.ReservationID {
		t.Fatalf("replay = %+v", d)
	}
	check("after a replay", "u1", R{Code: "queued", ReservationID: d3.ReservationID, Reservations: []R{paid1, c2, q3}})

	// Records written before any admission (or by an older version of the store) start the
	// list as well.
	set("u4", R{Code: "paid", ReservationID: "x1", OrderID: "o-x1"})
	set("u4", R{Code: "pending_payment", ReservationID: "x2", OrderID: "o-x2", PayBeforeMS: 5})
	check("records of two reservations", "u4", R{Code: "pending_payment", ReservationID: "x2", OrderID: "o-x2", PayBeforeMS: 5,
		Reservations: []R{{Code: "paid", ReservationID: "x1", OrderID: "o-x1"}, {Code: "pending_payment", ReservationID: "x2", OrderID: "o-x2", PayBeforeMS: 5}}})

	// The list keeps the newest MaxResultReservations.
	var ids []string
	for i := range admission.MaxResultReservations + 3 {
		ids = append(ids, MustAdmit(t, s, "a1", "u3", 1, fmt.Sprintf("c%d", i)).ReservationID)
	}
	r, err := s.GetResult(ctx, "a1", "u3")
	if err != nil || len(r.Reservations) != admission.MaxResultReservations || r.ReservationID != ids[len(ids)-1] ||
		r.Reservations[0].ReservationID != ids[3] || r.Reservations[len(r.Reservations)-1].ReservationID != ids[len(ids)-1] {
		t.Fatalf("after %d wins: %d records, latest %q, first %+v, %v", len(ids), len(r.Reservations), r.ReservationID, r.Reservations[:1], err)
	}

	for _, bad := range []R{{Code: "paid", ReservationID: "a b"}, {Code: "paid", ReservationID: "a\x00b"}} {
		if err := s.SetResult(ctx, "a1", "u1", bad); !errors.Is(err, admission.ErrBadInput) {
			t.Errorf("SetResult of reservation %q: %v, want ErrBadInput", bad.ReservationID, err)
		}
	}
	if _, err := s.GetResult(ctx, "a1", "u1\x00"); !errors.Is(err, admission.ErrBadInput) {
		t.Errorf("GetResult of a user with a NUL byte: %v, want ErrBadInput", err)
	}
	if _, err := s.Admit(ctx, admission.Request{Activity: "a1", User: "u1\x00", Qty: 1, RequestID: "n"}); !errors.Is(err, admission.ErrBadInput) {
		t.Errorf("Admit of a user with a NUL byte: %v, want ErrBadInput", err)
	}
	check("after the refusals", "u1", R{Code: "queued", ReservationID: d3.ReservationID, Reservations: []R{paid1, c2, q3}})
}

func readAll(t *testing.T, s admission.Store, act string) []admission.Win {
	t.Helper()
	ctx := context.Background()
	if err := s.EnsureGroup(ctx, act, "suite-readall"); err != nil {
		t.Fatal(err)
	}
	var all []admission.Win
	for {
		ws, err := s.ReadGroup(ctx, act, "suite-readall", "c", 100, 0, false)
		if err != nil {
			t.Fatal(err)
		}
		if len(ws) == 0 {
			return all
		}
		all = append(all, ws...)
	}
}

func testQueue(t *testing.T, s admission.Store) {
	ctx := context.Background()
	MustDefine(t, s, open("q", 10, 1))
	first := MustAdmit(t, s, "q", "u1", 1, "r")
	if err := s.EnsureGroup(ctx, "q", "orders"); err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureGroup(ctx, "q", "orders"); err != nil {
		t.Fatalf("EnsureGroup twice: %v", err)
	}
	MustAdmit(t, s, "q", "u2", 1, "r")
	wantBacklog(t, s, "q", 2, "two wins, none read")
	if _, err := s.Backlog(ctx, "q", "nosuch"); !errors.Is(err, admission.ErrNotFound) {
		t.Errorf("backlog of an unknown group: %v, want ErrNotFound", err)
	}
	if _, err := s.Backlog(ctx, "nosuch", "orders"); !errors.Is(err, admission.ErrUnknownActivity) {
		t.Errorf("backlog of an unknown activity: %v, want ErrUnknownActivity", err)
	}

	// Wins appended before the group existed are delivered too, in order.
	ws, err := s.ReadGroup(ctx, "q", "orders", "c1", 10, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 2 || ws[0].User != "u1" || ws[1].User != "u2" {
		t.Fatalf("read = %+v, want u1 then u2", ws)
	}
	w := ws[0]
	if w.ReservationID != first.ReservationID || w.Activity != "q" || w.Qty != 1 || w.RequestID != "r" ||
		w.Deliveries != 1 || w.ID == "" || w.At.IsZero() {
		t.Errorf("win = %+v", w)
	}
	if more, _ := s.ReadGroup(ctx, "q", "orders", "c1", 10, 0, false); len(more) != 0 {
		t.Errorf("new entries delivered twice: %+v", more)
	}
	wantBacklog(t, s, "q", 2, "two wins read, not acknowledged")

	// After a restart the consumer re-reads its own pending entries first.
	if err := s.Ack(ctx, "q", "orders", ws[1].ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Ack(ctx, "q", "orders", ws[1].ID); err != nil {
		t.Fatalf("ack twice: %v", err)
	}
	wantBacklog(t, s, "q", 1, "one of two acknowledged")
	pend, err := s.ReadGroup(ctx, "q", "orders", "c1", 10, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(pend) != 1 || pend[0].ID != w.ID || pend[0].Deliveries != 2 {
		t.Fatalf("pending = %+v, want u1's entry with 2 deliveries", pend)
	}
	if other, _ := s.ReadGroup(ctx, "q", "orders", "c2", 10, 0, true); len(other) != 0 {
		t.Errorf("c2 sees c1's pending entries: %+v", other)
	}

	// A consumer that died: its entry is claimed by another once idle long enough.
	if got, _ := s.Claim(ctx, "q", "orders", "c2", time.Hour, 10); len(got) != 0 {
		t.Errorf("claimed an entry that is not idle: %+v", got)
	}
	time.Sleep(150 * time.Millisecond)
	claimed, err := s.Claim(ctx, "q", "orders", "c2", 100*time.Millisecond, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(claimed) != 1 || claimed[0].ID != w.ID || claimed[0].Deliveries != 3 || claimed[0].User != "u1" {
		t.Fatalf("claimed = %+v, want u1's entry with 3 deliveries", claimed)
	}
	if p, _ := s.ReadGroup(ctx, "q", "orders", "c1", 10, 0, true); len(p) != 0 {
		t.Errorf("c1 still owns a claimed entry: %+v", p)
	}

	// Poison: dead-lettered and acknowledged in one step.
	if err := s.DeadLetter(ctx, "q", "orders", claimed[0], "insert failed 3 times"); err != nil {
		t.Fatal(err)
	}
	if p, _ := s.ReadGroup(ctx, "q", "orders", "c2", 10, 0, true); len(p) != 0 {
		t.Errorf("dead-lettered entry still pending: %+v", p)
	}
	wantBacklog(t, s, "q", 0, "one acknowledged, one dead-lettered")
	dead, err := s.DeadLetters(ctx, "q", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0].ReservationID != first.ReservationID || dead[0].Reason == "" || dead[0].User != "u1" {
		t.Errorf("dead letters = %+v", dead)
	}
	if snap := snapshot(t, s, "q"); snap.Dead != 1 {
		t.Errorf("snapshot dead = %d, want 1", snap.Dead)
	}

	// A blocking read wakes up for a new win.
	got := make(chan []admission.Win, 1)
	go func() {
		ws, err := s.ReadGroup(ctx, "q", "orders", "c3", 10, 5*time.Second, false)
		if err != nil {
			t.Errorf("blocking read: %v", err)
		}
		got <- ws
	}()
	time.Sleep(100 * time.Millisecond)
	MustAdmit(t, s, "q", "u3", 1, "r")
	select {
	case ws := <-got:
		if len(ws) != 1 || ws[0].User != "u3" {
			t.Errorf("blocking read = %+v, want u3", ws)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("blocking read did not return")
	}

	// A canceled context ends a blocking read.
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := s.ReadGroup(cctx, "q", "orders", "c3", 10, 30*time.Second, false)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("canceled blocking read: err = %v, want nil or context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a canceled blocking read did not return")
	}
}

// wantBacklog checks the backlog of act's "orders" group.
func wantBacklog(t *testing.T, s admission.Store, act string, want int64, when string) {
	t.Helper()
	n, err := s.Backlog(context.Background(), act, "orders")
	if err != nil || n != want {
		t.Errorf("backlog with %s = %d, %v; want %d", when, n, err, want)
	}
}

func testDelete(t *testing.T, s admission.Store) {
	ctx := context.Background()
	MustDefine(t, s, open("a1", 5, 1))
	MustAdmit(t, s, "a1", "u1", 1, "r")
	if err := s.Delete(ctx, "a1", false); !errors.Is(err, admission.ErrActivityRunning) {
		t.Errorf("unforced delete of a running activity: err = %v, want ErrActivityRunning", err)
	}
	if n := MustRemaining(t, s, "a1"); n != 4 {
		t.Fatalf("refused delete changed remaining to %d", n)
	}
	if err := s.Delete(ctx, "a1", true); err != nil {
		t.Fatalf("forced delete: %v", err)
	}
	if _, err := s.Admit(ctx, admission.Request{Activity: "a1", User: "u2", Qty: 1, RequestID: "r"}); !errors.Is(err, admission.ErrUnknownActivity) {
		t.Errorf("admit after delete: err = %v, want ErrUnknownActivity", err)
	}
	if ids, _ := s.Activities(ctx); len(ids) != 0 {
		t.Errorf("activities after delete = %v", ids)
	}
	// Defined again from scratch: nothing of the old sale remains.
	MustDefine(t, s, open("a1", 5, 1))
	if d := MustAdmit(t, s, "a1", "u1", 1, "r"); d.Outcome != admission.Won || d.Replayed {
		t.Errorf("admit after re-create = %+v, want a fresh win", d)
	}
	if err := s.Delete(ctx, "nope", true); !errors.Is(err, admission.ErrUnknownActivity) {
		t.Errorf("delete unknown: err = %v, want ErrUnknownActivity", err)
	}
	upcoming := open("later", 5, 1)
	upcoming.Start, upcoming.End = time.Now().Add(time.Hour), time.Now().Add(2*time.Hour)
	MustDefine(t, s, upcoming)
	if err := s.Delete(ctx, "later", false); err != nil {
		t.Errorf("delete upcoming: %v", err)
	}
}

// testRaiseStockRestocks: a redefinition that raises the total announces a restock (so nodes that
// flagged the activity sold out look again at once); one that leaves the total alone does not.
func testRaiseStockRestocks(t *testing.T, s admission.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	restocks, err := s.Restocks(ctx)
	if err != nil {
		t.Fatalf("restocks: %v", err)
	}
	a := open("a1", 1, 1)
	MustDefine(t, s, a)
	if d := MustAdmit(t, s, "a1", "u1", 1, "r1"); d.Outcome != admission.Won {
		t.Fatalf("admit = %+v", d)
	}
	lower := a
	lower.Stock, lower.Limit = 1, 2 // same total, other limit: no restock
	if _, err := s.Define(ctx, lower, true); err != nil {
		t.Fatalf("redefine: %v", err)
	}
	select {
	case id := <-restocks:
		t.Errorf("restock for %q after a redefinition that did not raise the total", id)
	case <-time.After(200 * time.Millisecond):
	}
	raised := lower
	raised.Stock = 3
	if _, err := s.Define(ctx, raised, true); err != nil {
		t.Fatalf("raise: %v", err)
	}
	select {
	case id := <-restocks:
		if id != "a1" {
			t.Errorf("restock for %q, want a1", id)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no restock broadcast after the total was raised")
	}
	if n := MustRemaining(t, s, "a1"); n != 2 {
		t.Errorf("remaining after raising 1 to 3 with 1 sold = %d, want 2", n)
	}
}
