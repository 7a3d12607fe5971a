package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestRedisBucketResults: a split activity answers results, releases, held requests and its snapshot
// with bucket reservation ids ("E-k.<bucket>"), the "queued" records of wins not folded yet
// derived from the home bucket's :users field; and its Queued counts wins when entries carry
// several.
func TestRedisBucketResults(t *testing.T) {
	srv := testsrv.StartRedis(t)
	s, err := New(redis.NewClient(&redis.Options{Addr: srv.Addr}), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	a := redisTestActivity("bres", 12, 2)
	a.Buckets = 4
	if _, err := s.Define(ctx, a, false); err != nil {
		t.Fatal(err)
	}
	var wins []admission.Decision
	for i := range 6 {
		u := fmt.Sprintf("u%d", i%3)
		d, err := s.Admit(ctx, admission.Request{Activity: a.ID, User: u, Qty: 1, RequestID: fmt.Sprint("r", i)})
		if err != nil || d.Outcome != admission.Won {
			t.Fatalf("admit %d: %+v, %v", i, d, err)
		}
		if _, _, ok := splitBucketEntryID(d.ReservationID, 4); !ok {
			t.Fatalf("reservation id %q names no bucket", d.ReservationID)
		}
		wins = append(wins, d)
	}
	// ids maps reservation ids to their order of winning, so that the answers print alike in
	// every run.
	ids := map[string]string{}
	for i, d := range wins {
		ids[d.ReservationID] = fmt.Sprint("W", i)
	}
	show := func(v string) string {
		for id, w := range ids {
			v = strings.ReplaceAll(v, `"`+id+`"`, w)
		}
		return v
	}
	if err := s.SetResult(ctx, a.ID, "u0", admission.Result{Code: "pending_payment", ReservationID: wins[0].ReservationID, OrderID: "o0"}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetResult(ctx, a.ID, "u1", admission.Result{Code: "paid", ReservationID: wins[4].ReservationID, OrderID: "o4"}); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{2, 5} { // u2 holds nothing after these
		if ok, err := s.Release(ctx, a.ID, wins[i].ReservationID); err != nil || !ok {
			t.Fatalf("release %d: %v, %v", i, ok, err)
		}
	}
	var b strings.Builder
	for _, u := range []string{"u0", "u1", "u2", "nobody"} {
		r, err := s.GetResult(ctx, a.ID, u)
		out, code, aerr := s.AppendResult(ctx, nil, a.ID, u)
		fmt.Fprintf(&b, "%s: %s %v | %s %s %v\n", u, show(string(admission.AppendResultJSON(nil, r))), err != nil, show(string(out)), code, aerr != nil)
	}
	h, err := s.HeldRequests(ctx, a.ID)
	slices.Sort(h)
	snap, serr := s.Activity(ctx, a.ID)
	fmt.Fprintf(&b, "held %v %v; remaining %d sold %d buyers %d queued %d %v\n", h, err, snap.Remaining, snap.Sold, snap.Buyers, snap.Queued, serr)
	// What the store answered when every record was written at the win (an earlier key layout,
	// checked equal to this one's answers before it was removed).
	const want = `u0: {"code":"queued","reservation_id":W3,"reservations":[{"code":"pending_payment","reservation_id":W0,"order_id":"o0"},{"code":"queued","reservation_id":W3}]} false | {"code":"queued","reservation_id":W3,"reservations":[{"code":"pending_payment","reservation_id":W0,"order_id":"o0"},{"code":"queued","reservation_id":W3}]} queued false
u1: {"code":"paid","reservation_id":W4,"order_id":"o4","reservations":[{"code":"queued","reservation_id":W1},{"code":"paid","reservation_id":W4,"order_id":"o4"}]} false | {"code":"paid","reservation_id":W4,"order_id":"o4","reservations":[{"code":"queued","reservation_id":W1},{"code":"paid","reservation_id":W4,"order_id":"o4"}]} paid false
u2: {"code":"queued","reservation_id":W5,"reservations":[{"code":"queued","reservation_id":W2},{"code":"queued","reservation_id":W5}]} false | {"code":"queued","reservation_id":W5,"reservations":[{"code":"queued","reservation_id":W2},{"code":"queued","reservation_id":W5}]} queued false
nobody: {"code":""} true |   true
held [r0 r1 r3 r4] <nil>; remaining 8 sold 4 buyers 2 queued 6 <nil>
`
	if got := b.String(); got != want {
		t.Fatalf("answers:\n%s\nwant\n%s", got, want)
	}

	// Concurrent buyers share script calls, so a stream entry carries several wins: Queued
	// counts wins, not entries (bucket_read.lua's wins counter).
	g := s
	a = redisTestActivity("bconc", 200, 1)
	a.Buckets = 2
	if _, err := g.Define(ctx, a, false); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var won atomic.Int64
	for i := range 120 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := g.Admit(ctx, admission.Request{Activity: "bconc", User: fmt.Sprint("c", i), Qty: 1, RequestID: "r"})
			if err == nil && d.Outcome == admission.Won {
				won.Add(1)
			}
		}()
	}
	wg.Wait()
	var entries int64
	for i := range 2 {
		entries += g.client.XLen(ctx, g.key(bucketID("bconc", i, 2), "orders")).Val()
	}
	snap, err = g.Activity(ctx, "bconc")
	if err != nil || won.Load() != 120 || snap.Queued != 120 || snap.Buyers != 120 {
		t.Fatalf("120 concurrent buyers: %d won, snapshot %+v, %v", won.Load(), snap, err)
	}
	if entries == 120 {
		t.Logf("no call carried two wins (%d entries): the wins counter was not told apart from XLEN", entries)
	}
}
