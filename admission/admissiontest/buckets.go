package admissiontest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// RunBuckets runs the conformance cases of split activities (Activity.Buckets) against stores
// made by newStore, which must split them (redisstore.Store).
func RunBuckets(t *testing.T, newStore NewStore) {
	tests := []struct {
		name string
		fn   func(*testing.T, admission.Store)
	}{
		{"ExactWinners", testBucketExactWinners},
		{"SkewedSellsOut", testBucketSkewed},
		{"NoFalseSoldOut", testBucketNoFalseSoldOut},
		{"ReleaseSellsAgain", testBucketRelease},
		{"HeldRequests", testBucketHeldRequests},
		{"Replay", testBucketReplay},
		{"QueueAndResults", testBucketQueueResults},
		{"Redefine", testBucketRedefine},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			t.Cleanup(func() { _ = s.Close() })
			tc.fn(t, s)
		})
	}
}

func bucketed(id string, stock, limit int64, n int) admission.Activity {
	a := open(id, stock, limit)
	a.Buckets = n
	return a
}

// usersIn returns count user ids whose home bucket among n is b (b < 0: any bucket).
func usersIn(prefix string, count, n, b int) []string {
	var users []string
	for i := 0; len(users) < count; i++ {
		u := fmt.Sprintf("%s%d", prefix, i)
		if b < 0 || admission.HomeBucket(u, n) == b {
			users = append(users, u)
		}
	}
	return users
}

// buyAll has every user buy qty with tries request ids each, from many goroutines, and returns
// the wins by user and whether any answer was sold_out while the activity still had stock.
func buyAll(t *testing.T, s admission.Store, activity string, users []string, tries int) map[string][]admission.Decision {
	t.Helper()
	ctx := context.Background()
	var (
		mu   sync.Mutex
		wins = map[string][]admission.Decision{}
		wg   sync.WaitGroup
		next atomic.Int64
	)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(users)*tries {
					return
				}
				u := users[i%len(users)]
				d, err := admitRetry(ctx, s, admission.Request{Activity: activity, User: u, Qty: 1, RequestID: fmt.Sprintf("r%d", i/len(users))})
				if err != nil {
					t.Errorf("admit %s: %v", u, err)
					return
				}
				if d.Outcome == admission.Won {
					mu.Lock()
					wins[u] = append(wins[u], d)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return wins
}

// admitRetry is Admit, tried again while the store answers ErrContended (a buyer following the
// 503's Retry-After, without the wait).
func admitRetry(ctx context.Context, s admission.Store, r admission.Request) (admission.Decision, error) {
	for {
		d, err := s.Admit(ctx, r)
		if !errors.Is(err, admission.ErrContended) {
			return d, err
		}
	}
}

func countWins(wins map[string][]admission.Decision, limit int64, t *testing.T) int64 {
	t.Helper()
	var n int64
	ids := map[string]bool{}
	for u, ds := range wins {
		if int64(len(ds)) > limit {
			t.Errorf("user %s won %d times, limit %d", u, len(ds), limit)
		}
		for _, d := range ds {
			if ids[d.ReservationID] {
				t.Errorf("reservation %s handed out twice", d.ReservationID)
			}
			ids[d.ReservationID] = true
			n++
		}
	}
	return n
}

func checkSoldOut(t *testing.T, s admission.Store, activity string, stock int64) {
	t.Helper()
	ctx := context.Background()
	snap, err := s.Activity(ctx, activity)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Remaining != 0 || snap.Sold != stock || snap.Stock != stock {
		t.Errorf("snapshot %+v: want stock %d all sold", snap, stock)
	}
	if n, err := s.Remaining(ctx, activity); err != nil || n != 0 {
		t.Errorf("remaining = %d, %v; want 0", n, err)
	}
	d, err := s.Admit(ctx, admission.Request{Activity: activity, User: "late", Qty: 1, RequestID: "x"})
	if err != nil || d.Outcome != admission.SoldOut || d.Remaining != 0 {
		t.Errorf("admit after the sell-out = %+v, %v; want sold_out, 0 left", d, err)
	}
}

// testBucketExactWinners: buckets 8, many goroutines, more demand than stock: exactly stock
// items won, nobody above the limit, a request id replays its first answer.
func testBucketExactWinners(t *testing.T, s admission.Store) {
	ctx := context.Background()
	const stock, limit = 300, 2
	MustDefine(t, s, bucketed("b-exact", stock, limit, 8))
	users := usersIn("u", 400, 8, -1)
	wins := buyAll(t, s, "b-exact", users, 3)
	if n := countWins(wins, limit, t); n != stock {
		t.Errorf("%d items won, stock %d", n, stock)
	}
	checkSoldOut(t, s, "b-exact", stock)
	for u, ds := range wins {
		d, err := s.Admit(ctx, admission.Request{Activity: "b-exact", User: u, Qty: 1, RequestID: "r0"})
		if err != nil {
			t.Fatal(err)
		}
		if d.Outcome == admission.Won && (!d.Replayed || !containsResv(ds, d.ReservationID)) {
			t.Errorf("replay of %s r0 = %+v, wins %+v", u, d, ds)
		}
		break
	}
	// The held wins' ids, gathered from every bucket: the ids buyAll sent, one per win at most
	// (testBucketHeldRequests checks them one by one).
	ids, err := s.HeldRequests(ctx, "b-exact")
	if err != nil || len(ids) == 0 || len(ids) > stock {
		t.Fatalf("held requests: %d, %v; want 1 to %d", len(ids), err, stock)
	}
	for _, id := range ids {
		if id != "r0" && id != "r1" && id != "r2" {
			t.Errorf("held requests list %q, which no buyer sent", id)
		}
	}
}

func containsResv(ds []admission.Decision, id string) bool {
	for _, d := range ds {
		if d.ReservationID == id {
			return true
		}
	}
	return false
}

// testBucketSkewed: every buyer hashes to bucket 0 of 8; the other buckets' stock must reach
// them, and sold_out comes only when all of it is sold.
func testBucketSkewed(t *testing.T, s admission.Store) {
	const stock = 160
	MustDefine(t, s, bucketed("b-skew", stock, 1, 8))
	users := usersIn("s", 250, 8, 0)
	// The first stock users in order each win: an answer sold_out before is an undersell.
	ctx := context.Background()
	for i, u := range users[:stock] {
		d, err := s.Admit(ctx, admission.Request{Activity: "b-skew", User: u, Qty: 1, RequestID: "r"})
		if err != nil {
			t.Fatal(err)
		}
		if d.Outcome != admission.Won {
			t.Fatalf("buyer %d of %d answered %s (remaining %d): undersold", i, stock, d.Outcome, d.Remaining)
		}
		if d.Remaining == 0 && i < stock-1 {
			t.Fatalf("buyer %d: remaining 0 with %d items unsold", i, stock-1-i)
		}
	}
	checkSoldOut(t, s, "b-skew", stock)
	// And concurrently, on a second activity.
	MustDefine(t, s, bucketed("b-skew2", stock, 1, 8))
	if n := countWins(buyAll(t, s, "b-skew2", users, 1), 1, t); n != stock {
		t.Errorf("concurrent skewed demand won %d of %d", n, stock)
	}
	checkSoldOut(t, s, "b-skew2", stock)
}

// testBucketNoFalseSoldOut: a tiny stock over 8 buckets and 64 buyers at once, all at home in
// two buckets, so that pulls race for single items: sold_out is answered only with nothing left,
// a contended buyer who tries again gets an item while any is left, and every item is sold.
func testBucketNoFalseSoldOut(t *testing.T, s admission.Store) {
	const stock, n = 24, 8
	for round := range 5 {
		id := fmt.Sprintf("b-race%d", round)
		MustDefine(t, s, bucketed(id, stock, 1, n))
		users := append(usersIn(fmt.Sprintf("r%dx", round), 32, n, 0), usersIn(fmt.Sprintf("r%dy", round), 32, n, 1)...)
		ctx := context.Background()
		var (
			wg        sync.WaitGroup
			won       atomic.Int64
			contended atomic.Int64
		)
		for _, u := range users {
			wg.Go(func() {
				for {
					d, err := s.Admit(ctx, admission.Request{Activity: id, User: u, Qty: 1, RequestID: "r"})
					if errors.Is(err, admission.ErrContended) {
						contended.Add(1)
						continue
					}
					if err != nil {
						t.Errorf("admit %s: %v", u, err)
						return
					}
					switch d.Outcome {
					case admission.Won:
						won.Add(1)
					case admission.SoldOut:
						if d.Remaining != 0 || d.RemainingPartial {
							t.Errorf("%s: sold_out with %d left (partial %v)", u, d.Remaining, d.RemainingPartial)
						}
					default:
						t.Errorf("%s: %+v", u, d)
					}
					return
				}
			})
		}
		wg.Wait()
		if won.Load() != stock {
			t.Errorf("round %d: %d won of %d (%d contended refusals)", round, won.Load(), stock, contended.Load())
		}
		checkSoldOut(t, s, id, stock)
		t.Logf("round %d: %d contended refusals", round, contended.Load())
	}
}

// testBucketRelease: a released item goes back to its own bucket and is sold again, to a buyer
// of any bucket.
func testBucketRelease(t *testing.T, s admission.Store) {
	ctx := context.Background()
	MustDefine(t, s, bucketed("b-rel", 8, 1, 4))
	users := usersIn("r", 12, 4, -1)
	wins := buyAll(t, s, "b-rel", users, 1)
	if n := countWins(wins, 1, t); n != 8 {
		t.Fatalf("%d won of 8", n)
	}
	var d admission.Decision
	for _, ds := range wins {
		d = ds[0]
		break
	}
	for i := range 2 {
		ok, err := s.Release(ctx, "b-rel", d.ReservationID)
		if err != nil || ok != (i == 0) {
			t.Fatalf("release %d of %s = %v, %v", i, d.ReservationID, ok, err)
		}
	}
	if ok, err := s.Release(ctx, "b-rel", "1-0.99"); ok || !errors.Is(err, admission.ErrNotFound) {
		t.Errorf("release of a bucket that does not exist = %v, %v; want ErrNotFound", ok, err)
	}
	if n, err := s.Remaining(ctx, "b-rel"); err != nil || n != 1 {
		t.Fatalf("remaining after a release = %d, %v", n, err)
	}
	// Someone whose home bucket is another one buys it.
	var got bool
	for _, u := range usersIn("late", 40, 4, -1) {
		d2, err := s.Admit(ctx, admission.Request{Activity: "b-rel", User: u, Qty: 1, RequestID: "x"})
		if err != nil {
			t.Fatal(err)
		}
		if d2.Outcome == admission.Won {
			got = true
			break
		}
	}
	if !got {
		t.Fatal("the released item was not sold again")
	}
	checkSoldOut(t, s, "b-rel", 8)
}

// testBucketReplay: a split activity's Replay answers as Admit's replay does, from the user's
// home bucket: the reservation id with its bucket, a partial Remaining, the qty that was won
// (the repeat asks for another).
func testBucketReplay(t *testing.T, s admission.Store) {
	ctx := context.Background()
	MustDefine(t, s, bucketed("b-replay", 8, 2, 4))
	for _, u := range usersIn("p", 4, 4, -1) {
		first, err := admitRetry(ctx, s, admission.Request{Activity: "b-replay", User: u, Qty: 1, RequestID: "k-" + u})
		if err != nil || first.Outcome != admission.Won || first.Qty != 1 {
			t.Fatalf("%s buys: %+v, %v", u, first, err)
		}
		want := MustAdmit(t, s, "b-replay", u, 2, "k-"+u)
		got, err := s.Replay(ctx, "b-replay", u, "k-"+u)
		if err != nil || got != want || got.ReservationID != first.ReservationID || !got.Replayed || got.Qty != 1 {
			t.Errorf("%s: replay = %+v, %v; want Admit's replay %+v of %+v", u, got, err, want, first)
		}
		if d, err := s.Replay(ctx, "b-replay", u, "other"); !errors.Is(err, admission.ErrNotFound) {
			t.Errorf("%s: replay of a request id that won nothing = %+v, %v; want ErrNotFound", u, d, err)
		}
	}
	if n, err := s.Remaining(ctx, "b-replay"); err != nil || n != 4 {
		t.Errorf("remaining after the replays = %d, %v; want 4", n, err)
	}
}

// testBucketHeldRequests: HeldRequests of a split activity lists the held wins of every bucket,
// a user's second win beside the first, and no released win, whichever bucket it was in.
func testBucketHeldRequests(t *testing.T, s admission.Store) {
	ctx := context.Background()
	const n = 4
	MustDefine(t, s, bucketed("b-held", 12, 2, n))
	checkHeld(t, s, "b-held", "before any win", 0)
	// Two buyers at home in each bucket, the first of each with a second win.
	var want []string
	resv, owner := map[string]string{}, map[string]string{}
	for b := range n {
		for j, u := range usersIn(fmt.Sprintf("h%d-", b), 2, n, b) {
			reqs := []string{u + "-1"}
			if j == 0 {
				reqs = append(reqs, u+"-2")
			}
			for _, req := range reqs {
				d, err := admitRetry(ctx, s, admission.Request{Activity: "b-held", User: u, Qty: 1, RequestID: req})
				if err != nil || d.Outcome != admission.Won {
					t.Fatalf("admit %s/%s = %+v, %v", u, req, d, err)
				}
				resv[req], owner[req] = d.ReservationID, u
				want = append(want, req)
			}
		}
	}
	checkSoldOut(t, s, "b-held", 12)
	checkHeld(t, s, "b-held", "after the sell-out", len(want), want...)
	// A replay adds nothing.
	if d, err := s.Admit(ctx, admission.Request{Activity: "b-held", User: owner[want[0]], Qty: 1, RequestID: want[0], MayReplay: true}); err != nil || !d.Replayed {
		t.Fatalf("replay of %s = %+v, %v", want[0], d, err)
	}
	checkHeld(t, s, "b-held", "after a replay", len(want), want...)
	// Release, in buckets 0 and 1, a first of two wins and in bucket 2 a buyer's one win.
	gone := map[string]bool{want[0]: true, want[3]: true, want[8]: true}
	var left []string
	for _, req := range want {
		if !gone[req] {
			left = append(left, req)
			continue
		}
		if ok, err := s.Release(ctx, "b-held", resv[req]); !ok || err != nil {
			t.Fatalf("release %s = %v, %v", req, ok, err)
		}
	}
	checkHeld(t, s, "b-held", "after three releases", len(left), left...)
}

// withinCount reports whether a read of ws kept to count wins, allowing what the Queue contract
// allows past it: the rest of the entry that holds the count-th win, which comes whole (a Redis
// stream entry holds all the wins of one admission call: ids "<entry>-<k>", with ".<bucket>"
// after them for a split activity).
func withinCount(ws []admission.Win, count int) bool {
	if len(ws) <= count {
		return true
	}
	entry := func(id string) string {
		win, bucket := id, ""
		if i := strings.LastIndexByte(id, '.'); i >= 0 {
			win, bucket = id[:i], id[i:]
		}
		if strings.Count(win, "-") != 2 {
			return "" // not a win of a shared entry
		}
		return win[:strings.LastIndexByte(win, '-')] + bucket
	}
	last := entry(ws[count-1].ID)
	if last == "" {
		return false
	}
	for _, w := range ws[count:] {
		if entry(w.ID) != last {
			return false
		}
	}
	return true
}

// testBucketQueueResults: the order consumer's view of a split activity is one queue, and a
// buyer's result record carries the reservation id the admission answered.
func testBucketQueueResults(t *testing.T, s admission.Store) {
	ctx := context.Background()
	MustDefine(t, s, bucketed("b-q", 40, 1, 8))
	if err := s.EnsureGroup(ctx, "b-q", "g"); err != nil {
		t.Fatal(err)
	}
	wins := buyAll(t, s, "b-q", usersIn("q", 60, 8, -1), 1)
	resv := map[string]string{}
	for u, ds := range wins {
		resv[ds[0].ReservationID] = u
		r, err := s.GetResult(ctx, "b-q", u)
		if err != nil || r.Code != "queued" || r.ReservationID != ds[0].ReservationID {
			t.Errorf("result of %s = %+v, %v; want queued %s", u, r, err, ds[0].ReservationID)
		}
		b, code, err := s.AppendResult(ctx, nil, "b-q", u)
		want, _ := jsonOf(r)
		if err != nil || code != "queued" || string(b) != want {
			t.Errorf("append result of %s = %s %s %v; want %s", u, b, code, err, want)
		}
	}
	if n, err := s.Backlog(ctx, "b-q", "g"); err != nil || n != 40 {
		t.Errorf("backlog = %d, %v; want 40", n, err)
	}
	var got []admission.Win
	for len(got) < 40 {
		ws, err := s.ReadGroup(ctx, "b-q", "g", "c1", 7, 0, false)
		if err != nil {
			t.Fatal(err)
		}
		if len(ws) == 0 || !withinCount(ws, 7) {
			t.Fatalf("read %d wins with %d of 40 read, count 7", len(ws), len(got))
		}
		got = append(got, ws...)
	}
	for _, w := range got {
		if w.Activity != "b-q" || resv[w.ReservationID] != w.User || w.ID != w.ReservationID {
			t.Errorf("entry %+v is no win of the activity", w)
		}
	}
	if ws, err := s.ReadGroup(ctx, "b-q", "g", "c1", 100, 0, true); err != nil || len(ws) != 40 {
		t.Errorf("pending re-read: %d, %v; want 40", len(ws), err)
	}
	if err := s.DeadLetter(ctx, "b-q", "g", got[0], "test"); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 0, len(got))
	for _, w := range got[1:] {
		ids = append(ids, w.ID)
	}
	if err := s.Ack(ctx, "b-q", "g", ids...); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Backlog(ctx, "b-q", "g"); err != nil || n != 0 {
		t.Errorf("backlog after acks = %d, %v", n, err)
	}
	dead, err := s.DeadLetters(ctx, "b-q", 10)
	if err != nil || len(dead) != 1 || dead[0].ID != got[0].ID || dead[0].Reason != "test" {
		t.Errorf("dead letters = %+v, %v; want %s", dead, err, got[0].ID)
	}
	// A payment state for one win, and a foreign id, read back as written.
	u := got[1].User
	if err := s.SetResult(ctx, "b-q", u, admission.Result{Code: "pending_payment", ReservationID: got[1].ReservationID, OrderID: "o1"}); err != nil {
		t.Fatal(err)
	}
	if r, err := s.GetResult(ctx, "b-q", u); err != nil || r.Code != "pending_payment" || r.ReservationID != got[1].ReservationID {
		t.Errorf("result after set = %+v, %v", r, err)
	}
	if err := s.SetResult(ctx, "b-q", "nobody", admission.Result{Code: "failed", ReservationID: "ext.1"}); err != nil {
		t.Fatal(err)
	}
	if r, err := s.GetResult(ctx, "b-q", "nobody"); err != nil || r.ReservationID != "ext.1" {
		t.Errorf("foreign id read back as %+v, %v", r, err)
	}
	snap, err := s.Activity(ctx, "b-q")
	if err != nil || snap.Queued != 40 || snap.Dead != 1 || snap.Buyers != 40 || snap.Buckets != 8 {
		t.Errorf("snapshot %+v, %v", snap, err)
	}
	if ids, err := s.Activities(ctx); err != nil || len(ids) != 1 || ids[0] != "b-q" {
		t.Errorf("activities = %v, %v; want only the parent", ids, err)
	}
	if err := s.Delete(ctx, "b-q", true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Activity(ctx, "b-q"); !errors.Is(err, admission.ErrUnknownActivity) {
		t.Errorf("after delete: %v", err)
	}
}

// testBucketRedefine: a raise and a cut move the buckets' stock; the count is fixed.
func testBucketRedefine(t *testing.T, s admission.Store) {
	ctx := context.Background()
	a := MustDefine(t, s, bucketed("b-def", 20, 1, 4))
	wins := buyAll(t, s, "b-def", usersIn("d", 6, 4, -1), 1)
	if n := countWins(wins, 1, t); n != 6 {
		t.Fatalf("won %d of 6", n)
	}
	for _, change := range []struct{ stock int64 }{{50}, {10}, {6}} {
		a.Stock = change.stock
		if _, err := s.Define(ctx, a, true); err != nil {
			t.Fatalf("redefine to %d: %v", change.stock, err)
		}
		snap, err := s.Activity(ctx, "b-def")
		if err != nil || snap.Stock != change.stock || snap.Sold != 6 || snap.Remaining != change.stock-6 {
			t.Errorf("after redefining to %d: %+v, %v", change.stock, snap, err)
		}
	}
	a.Stock = 5
	if _, err := s.Define(ctx, a, true); !errors.Is(err, admission.ErrStockBelowSold) {
		t.Errorf("cut below sold: %v", err)
	}
	b := a
	b.Stock, b.Buckets = 6, 2
	if _, err := s.Define(ctx, b, true); !errors.Is(err, admission.ErrBadInput) {
		t.Errorf("another bucket count: %v; want ErrBadInput", err)
	}
	b.Buckets = 0
	if _, err := s.Define(ctx, b, true); !errors.Is(err, admission.ErrBadInput) {
		t.Errorf("no buckets over a split activity: %v; want ErrBadInput", err)
	}
	c := open("b-plain", 10, 1)
	MustDefine(t, s, c)
	c.Buckets = 2
	if _, err := s.Define(ctx, c, true); !errors.Is(err, admission.ErrBadInput) {
		t.Errorf("buckets over an activity without: %v; want ErrBadInput", err)
	}
}

func jsonOf(r admission.Result) (string, error) {
	b, err := json.Marshal(r)
	return string(b), err
}
