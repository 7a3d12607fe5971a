package redisstore

import (
	"context"
	"errors"
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

// redisLayoutStores returns two stores on one server with the same key prefix, creating
// activities of layout 1 and of layout 2.
func redisLayoutStores(t *testing.T) (s1, s2 *Store, raw *redis.Client) {
	t.Helper()
	srv := testsrv.StartRedis(t)
	var st [2]*Store
	for i := range st {
		s, err := New(redis.NewClient(&redis.Options{Addr: srv.Addr}), Options{Layout: i + 1, AdmitBatch: 1 + 63*i})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		st[i] = s
	}
	raw = redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = raw.Close() })
	return st[0], st[1], raw
}

// redisKeyDump is every key of the server with its type and contents, for "nothing written".
func redisKeyDump(t *testing.T, c *redis.Client) string {
	t.Helper()
	ctx := context.Background()
	keys := c.Keys(ctx, "*").Val()
	var b strings.Builder
	for _, k := range keys {
		switch c.Type(ctx, k).Val() {
		case "hash":
			fmt.Fprintln(&b, k, c.HGetAll(ctx, k).Val())
		case "string":
			fmt.Fprintln(&b, k, c.Get(ctx, k).Val())
		case "stream":
			fmt.Fprintln(&b, k, c.XRange(ctx, k, "-", "+").Val())
		default:
			fmt.Fprintln(&b, k, c.Type(ctx, k).Val())
		}
	}
	return b.String()
}

// TestRedisLayoutScriptsRefuse: every admission, release and result script refuses an activity
// of the other layout (LAYOUT) and writes nothing, so that a stale cached layout can never write
// one layout's keys into the other's activity.
func TestRedisLayoutScriptsRefuse(t *testing.T) {
	s1, s2, raw := redisLayoutStores(t)
	ctx := context.Background()
	for _, s := range []*Store{s1, s2} {
		a := fmt.Sprintf("lay%d", s.layout)
		if _, err := s.Define(ctx, redisTestActivity(a, 10, 2), false); err != nil {
			t.Fatal(err)
		}
		d, err := s.Admit(ctx, admission.Request{Activity: a, User: "u", Qty: 1, RequestID: "r"})
		if err != nil || d.Outcome != admission.Won {
			t.Fatalf("admit on layout %d: %+v, %v", s.layout, d, err)
		}
	}
	if v := raw.HGet(ctx, s2.key("lay2", "meta"), "layout").Val(); v != "2" {
		t.Fatalf("layout-2 store defined an activity with layout %q", v)
	}
	if n := raw.HExists(ctx, s1.key("lay1", "meta"), "layout").Val(); n {
		t.Fatal("layout-1 store wrote a layout field")
	}
	before := redisKeyDump(t, raw)
	type call struct {
		name   string
		script *redis.Script
		keys   []string
		args   []any
	}
	// Each layout's scripts, with the other layout's activity (lay2 for layout 1's).
	on := func(a string) []call {
		return []call{
			{"admit.lua", s1.admit, s1.admitKeys(a), []any{"u2", 1, "r2"}},
			{"release.lua", s1.release, []string{s1.key(a, "meta"), s1.key(a, "stock"), s1.key(a, "buyers"), s1.key(a, "released"), s1.key(a, "resv")}, []any{"1-0", "t", "ch", a}},
			{"set_result.lua", s1.setResult, []string{s1.key(a, "meta"), s1.key(a, "results")}, []any{"u", `{"code":"paid"}`, "", admission.MaxResultReservations}},
		}
	}
	on2 := func(a string) []call {
		return []call{
			{"admit_v2.lua", s2.admit2, s2.admitKeysV2(a), []any{"u2", 1, "r2"}},
			{"release_v2.lua", s2.release2, []string{s2.key(a, "meta"), s2.key(a, "stock"), s2.key(a, "users"), s2.key(a, "released"), s2.key(a, "orders")}, []any{"1-0-1", "t", "ch", a}},
			{"set_result_v2.lua", s2.setResult2, []string{s2.key(a, "meta"), s2.key(a, "results"), s2.key(a, "users")}, []any{"u", `{"code":"paid"}`, "", admission.MaxResultReservations}},
		}
	}
	for _, c := range append(on("lay2"), on2("lay1")...) {
		err := redisScriptErr(c.script.Run(ctx, raw, c.keys, c.args...).Err())
		if !errors.Is(err, admission.ErrLayout) {
			t.Errorf("%s on the other layout's activity: %v, want %v", c.name, err, admission.ErrLayout)
		}
	}
	if after := redisKeyDump(t, raw); after != before {
		t.Errorf("a refused script wrote:\n%s\nwas\n%s", after, before)
	}
}

// TestRedisLayoutStaleCache: a store that cached an activity's layout serves it after another
// node deleted it and defined it again with the other layout (the scripts refuse, the store
// reads the layout again and retries), for every call that picks scripts or keys by layout; and a
// layout the store cannot make agree (a bucket without its parent's layout) answers ErrLayout.
func TestRedisLayoutStaleCache(t *testing.T) {
	s1, s2, raw := redisLayoutStores(t)
	ctx := context.Background()
	for _, c := range []struct{ cached, redefiner *Store }{{s1, s2}, {s2, s1}} {
		a := fmt.Sprintf("stale%d", c.cached.layout)
		if _, err := c.cached.Define(ctx, redisTestActivity(a, 10, 2), false); err != nil {
			t.Fatal(err)
		}
		if d, err := c.cached.Admit(ctx, admission.Request{Activity: a, User: "u0", Qty: 1, RequestID: "r0"}); err != nil || d.Outcome != admission.Won {
			t.Fatalf("%s: first admit %+v, %v", a, d, err)
		}
		// Another node deletes it and defines it again: the other layout.
		if err := c.redefiner.Delete(ctx, a, true); err != nil {
			t.Fatal(err)
		}
		if _, err := c.redefiner.Define(ctx, redisTestActivity(a, 10, 2), false); err != nil {
			t.Fatal(err)
		}
		d, err := c.cached.Admit(ctx, admission.Request{Activity: a, User: "u1", Qty: 2, RequestID: "r1"})
		if err != nil || d.Outcome != admission.Won || d.Remaining != 8 {
			t.Fatalf("%s: admit with a stale layout: %+v, %v", a, d, err)
		}
		// The admission's retry read the layout again: make it stale again for each further call.
		stale := func() { c.cached.layoutCache.Store(a, c.cached.layout) }
		stale()
		if err := c.cached.SetResult(ctx, a, "u1", admission.Result{Code: "pending_payment", ReservationID: d.ReservationID, OrderID: "o"}); err != nil {
			t.Fatalf("%s: set result: %v", a, err)
		}
		if r, err := c.redefiner.GetResult(ctx, a, "u1"); err != nil || r.Code != "pending_payment" || r.ReservationID != d.ReservationID {
			t.Fatalf("%s: result %+v, %v", a, r, err)
		}
		// Holders, a read, corrects a stale layout too (the Guard's holder set).
		stale()
		if h, err := c.cached.Holders(ctx, a); err != nil || fmt.Sprint(h) != "[u1]" {
			t.Fatalf("%s: holders with a stale layout: %q, %v; want [u1]", a, h, err)
		}
		stale()
		if ok, err := c.cached.Release(ctx, a, d.ReservationID); err != nil || !ok {
			t.Fatalf("%s: release with a stale layout: %v, %v", a, ok, err)
		}
		if n, err := c.redefiner.Remaining(ctx, a); err != nil || n != 10 {
			t.Fatalf("%s: remaining %d, %v after the release", a, n, err)
		}
		want, other := "users", "req" // :buyers loses its last holder with the release
		if c.redefiner.layout == redisLayout1 {
			want, other = other, want
		}
		if raw.Exists(ctx, c.cached.key(a, want)).Val() != 1 || raw.Exists(ctx, c.cached.key(a, other)).Val() != 0 {
			t.Fatalf("%s: keys %v after a redefinition as layout %d", a, raw.Keys(ctx, "*{"+a+"}*").Val(), c.redefiner.layout)
		}
	}

	// A bucket that lost its layout field: its parent says 2, the bucket's scripts disagree.
	a := redisTestActivity("split", 8, 1)
	a.Buckets = 2
	if _, err := s2.Define(ctx, a, false); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := raw.HDel(ctx, s2.key(bucketID("split", i, 2), "meta"), "layout").Err(); err != nil {
			t.Fatal(err)
		}
	}
	_, err := s2.Admit(ctx, admission.Request{Activity: "split", User: "u", Qty: 1, RequestID: "r"})
	if !errors.Is(err, admission.ErrLayout) {
		t.Fatalf("admit on buckets without their parent's layout: %v, want %v", err, admission.ErrLayout)
	}
}

// TestRedisLayout2BucketResults: a split activity of layout 2 (whose QueueAndResults case in
// the bucket suite stops at the wins queue until the queue reads layout 2) answers results,
// releases, holders and its snapshot with bucket reservation ids, as layout 1 does.
func TestRedisLayout2BucketResults(t *testing.T) {
	s1, s2, _ := redisLayoutStores(t)
	ctx := context.Background()
	got := map[int]string{}
	for _, s := range []*Store{s1, s2} {
		a := redisTestActivity(fmt.Sprintf("bres%d", s.layout), 12, 2)
		a.Buckets = 4
		if _, err := s.Define(ctx, a, false); err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		var wins []admission.Decision
		for i := range 6 {
			u := fmt.Sprintf("u%d", i%3)
			d, err := s.Admit(ctx, admission.Request{Activity: a.ID, User: u, Qty: 1, RequestID: fmt.Sprint("r", i)})
			if err != nil || d.Outcome != admission.Won {
				t.Fatalf("layout %d: admit %d: %+v, %v", s.layout, i, d, err)
			}
			if _, _, ok := splitBucketEntryID(d.ReservationID, 4); !ok {
				t.Fatalf("layout %d: reservation id %q names no bucket", s.layout, d.ReservationID)
			}
			wins = append(wins, d)
		}
		// ids maps reservation ids to their order of winning, so both layouts print alike.
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
				t.Fatalf("layout %d: release %d: %v, %v", s.layout, i, ok, err)
			}
		}
		for _, u := range []string{"u0", "u1", "u2", "nobody"} {
			r, err := s.GetResult(ctx, a.ID, u)
			out, code, aerr := s.AppendResult(ctx, nil, a.ID, u)
			fmt.Fprintf(&b, "%s: %s %v | %s %s %v\n", u, show(string(admission.AppendResultJSON(nil, r))), err != nil, show(string(out)), code, aerr != nil)
		}
		h, err := s.Holders(ctx, a.ID)
		slices.Sort(h)
		snap, serr := s.Activity(ctx, a.ID)
		fmt.Fprintf(&b, "holders %v %v; remaining %d sold %d buyers %d queued %d %v\n", h, err, snap.Remaining, snap.Sold, snap.Buyers, snap.Queued, serr)
		got[s.layout] = b.String()
	}
	if got[1] != got[2] {
		t.Fatalf("layout 1:\n%s\nlayout 2:\n%s", got[1], got[2])
	}
	t.Logf("both layouts:\n%s", got[1])

	// Concurrent buyers share script calls, so a stream entry carries several wins: Queued
	// counts wins, not entries (bucket_read.lua's wins counter).
	a := redisTestActivity("bconc", 200, 1)
	a.Buckets = 2
	if _, err := s2.Define(ctx, a, false); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var won atomic.Int64
	for i := range 120 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := s2.Admit(ctx, admission.Request{Activity: "bconc", User: fmt.Sprint("c", i), Qty: 1, RequestID: "r"})
			if err == nil && d.Outcome == admission.Won {
				won.Add(1)
			}
		}()
	}
	wg.Wait()
	var entries int64
	for i := range 2 {
		entries += s2.client.XLen(ctx, s2.key(bucketID("bconc", i, 2), "orders")).Val()
	}
	snap, err := s2.Activity(ctx, "bconc")
	if err != nil || won.Load() != 120 || snap.Queued != 120 || snap.Buyers != 120 {
		t.Fatalf("120 concurrent buyers: %d won, snapshot %+v, %v", won.Load(), snap, err)
	}
	if entries == 120 {
		t.Logf("no call carried two wins (%d entries): the wins counter was not told apart from XLEN", entries)
	}
}
