package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// writeOldActivity writes activity id as an earlier build's define.lua wrote it, without layout
// 2 in :meta (the key layout of :buyers, :req and :resv), with one win of alice in those keys,
// and lists it when listed. With buckets > 1 it writes a split parent and its buckets the same
// way (bucket_define.lua's and bucket_setup.lua's fields).
func writeOldActivity(t *testing.T, c *redis.Client, prefix, id string, buckets int, listed bool) {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	key := func(on, name string) string { return prefix + ":{" + on + "}:" + name }
	def := []any{"start_ms", now.Add(-time.Minute).UnixMilli(), "end_ms", now.Add(time.Hour).UnixMilli(), "pay_ms", 60000, "salt", "0123456789abcdef"}
	sets := []string{id}
	if buckets > 1 {
		parent := append([]any{"total", 10 * buckets, "user_limit", 1, "buckets", buckets, "gen", "g1"}, def...)
		if err := c.HSet(ctx, key(id, "meta"), parent...).Err(); err != nil {
			t.Fatal(err)
		}
		sets = nil
		for i := range buckets {
			sets = append(sets, bucketID(id, i, buckets))
		}
	}
	for _, on := range sets {
		meta := append([]any{"stock_total", 10, "limit", 1}, def...)
		if buckets > 1 {
			meta = append(meta, "gen", "g1")
		}
		p := c.TxPipeline()
		p.HSet(ctx, key(on, "meta"), meta...)
		p.Set(ctx, key(on, "stock"), 9, 0)
		p.HSet(ctx, key(on, "buyers"), "alice", 1)
		p.XAdd(ctx, &redis.XAddArgs{Stream: key(on, "orders"), ID: "1700000000000-0", Values: []any{"user", "alice", "qty", 1, "req", "r1", "at", now.UnixMilli()}})
		p.HSet(ctx, key(on, "req"), "alice\x00r1", "9:1700000000000-0")
		p.HSet(ctx, key(on, "resv"), "1700000000000-0", "1:alice")
		p.HSet(ctx, key(on, "results"), "alice", `{"code":"queued","reservation_id":"1700000000000-0"}`)
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if listed {
		if err := c.SAdd(ctx, prefix+":activities", id).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// rawClient is a client of srv for the test to write and inspect with.
func rawClient(t *testing.T, srv *testsrv.Redis) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// keyDump is every key of the server with its type and contents, for "nothing written".
func keyDump(t *testing.T, c *redis.Client) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	keys := c.Keys(ctx, "*").Val()
	sort.Strings(keys) // KEYS answers in hash-table order, which a rehash changes
	for _, k := range keys {
		switch c.Type(ctx, k).Val() {
		case "hash":
			fmt.Fprintln(&b, k, c.HGetAll(ctx, k).Val())
		case "string":
			fmt.Fprintln(&b, k, c.Get(ctx, k).Val())
		case "stream":
			fmt.Fprintln(&b, k, c.XRange(ctx, k, "-", "+").Val())
			groups, _ := c.XInfoGroups(ctx, k).Result()
			fmt.Fprintln(&b, k, "groups", groups)
		default:
			fmt.Fprintln(&b, k, c.Type(ctx, k).Val())
		}
	}
	return b.String()
}

// wantOldLayout fails unless err is an *OldLayoutError (ErrOldLayout) naming activity under prefix.
func wantOldLayout(t *testing.T, what string, err error, prefix, activity string) {
	t.Helper()
	var ole *OldLayoutError
	if !errors.Is(err, ErrOldLayout) || !errors.As(err, &ole) || ole.Activity != activity || ole.Prefix != prefix {
		t.Errorf("%s: %v; want ErrOldLayout naming activity %s (prefix %s)", what, err, activity, prefix)
	}
}

// TestRedisNewRefusesOldLayout: a Redis that lists an activity an earlier build created in its own
// key layout (no layout 2 in its :meta, or in the :meta of a bucket) is refused when the store is
// made, with an error that names each such activity and says what to do; this build's activities,
// a listed activity that is not defined and another prefix's activities pass.
func TestRedisNewRefusesOldLayout(t *testing.T) {
	ctx := context.Background()
	srv := testsrv.StartRedis(t)
	raw := rawClient(t, srv)
	newStore := func(prefix string) (*Store, error) {
		return New(redis.NewClient(&redis.Options{Addr: srv.Addr}), Options{KeyPrefix: prefix})
	}

	// This build's activities, plain and split, and a listing whose definition is gone.
	s, err := newStore("")
	if err != nil {
		t.Fatalf("new store on an empty Redis: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	mustDefine(t, s, redisTestActivity("cur", 10, 1))
	split := redisTestActivity("cur-split", 10, 1)
	split.Buckets = 2
	mustDefine(t, s, split)
	if err := raw.SAdd(ctx, "seckill:activities", "gone").Err(); err != nil {
		t.Fatal(err)
	}
	if s2, err := newStore(""); err != nil {
		t.Fatalf("new store on this build's activities: %v", err)
	} else {
		_ = s2.Close()
	}

	// An earlier build's activity.
	writeOldActivity(t, raw, "seckill", "phone-1001", 1, true)
	_, err = newStore("")
	wantOldLayout(t, "new store", err, "seckill", "phone-1001")
	const msg = "new redis store: activity phone-1001 in Redis (prefix seckill) uses the key layout of an earlier build, " +
		"which this build no longer serves: finish or delete that sale with the earlier build (or delete its keys, " +
		"seckill:{phone-1001}:* and, if it is split into buckets, seckill:{phone-1001#*}:*, and remove phone-1001 " +
		"from the set seckill:activities) before starting this one"
	if err == nil || err.Error() != msg {
		t.Errorf("new store: %v\nwant %s", err, msg)
	}

	// Another prefix's store does not see it.
	if o, err := newStore("other"); err != nil {
		t.Fatalf("new store of another prefix: %v", err)
	} else {
		_ = o.Close()
	}

	// Every such activity is named: an earlier build's split one too, and a split one of this
	// build's layout whose bucket is not.
	writeOldActivity(t, raw, "seckill", "old-split", 3, true)
	split = redisTestActivity("half", 10, 1)
	split.Buckets = 2
	mustDefine(t, s, split)
	if err := raw.HDel(ctx, s.key(bucketID("half", 1, 2), "meta"), "layout").Err(); err != nil {
		t.Fatal(err)
	}
	_, err = newStore("")
	var names []string
	if joined, ok := errors.Unwrap(err).(interface{ Unwrap() []error }); ok {
		for _, e := range joined.Unwrap() {
			var ole *OldLayoutError
			if !errors.As(e, &ole) {
				t.Fatalf("%v is no *OldLayoutError", e)
			}
			names = append(names, ole.Activity)
		}
	}
	if !errors.Is(err, ErrOldLayout) || fmt.Sprint(names) != "[half old-split phone-1001]" {
		t.Errorf("new store: %v; want the activities half, old-split and phone-1001 named", err)
	}

	// The old activity deleted by hand as the error says: the store starts.
	for _, id := range []string{"phone-1001", "old-split", "half"} {
		for _, pattern := range []string{"seckill:{" + id + "}:*", "seckill:{" + id + "#*}:*"} {
			if keys := raw.Keys(ctx, pattern).Val(); len(keys) > 0 {
				if err := raw.Del(ctx, keys...).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := raw.SRem(ctx, "seckill:activities", id).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if s3, err := newStore(""); err != nil {
		t.Fatalf("new store after the old activities' keys were deleted: %v", err)
	} else {
		_ = s3.Close()
	}
}

// TestRedisOldLayoutRefused: a store that meets an activity of an earlier build's key layout after
// it was made (written while it ran, unlisted, or defined again by an earlier build after this
// store cached it) refuses every call on it with ErrOldLayout naming it, and writes nothing; so
// does every script that reads or writes an activity's keys, before its first write.
func TestRedisOldLayoutRefused(t *testing.T) {
	ctx := context.Background()
	srv := testsrv.StartRedis(t)
	raw := rawClient(t, srv)
	s, err := New(redis.NewClient(&redis.Options{Addr: srv.Addr}), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	writeOldActivity(t, raw, "seckill", "old", 1, false)
	writeOldActivity(t, raw, "seckill", "old-split", 2, false)
	before := keyDump(t, raw)

	for _, id := range []string{"old", "old-split"} {
		a := redisTestActivity(id, 10, 1)
		if id == "old-split" {
			a.Buckets, a.Stock = 2, 20
		}
		w := admission.Win{ID: "1700000000000-0-1"}
		for _, c := range []struct {
			name string
			call func() error
		}{
			{"define", func() error { _, err := s.Define(ctx, a, false); return err }},
			{"admit", func() error {
				_, err := s.Admit(ctx, admission.Request{Activity: id, User: "bob", Qty: 1, RequestID: "r2"})
				return err
			}},
			{"replay", func() error { _, err := s.Replay(ctx, id, "bob", "r2"); return err }},
			{"release", func() error { _, err := s.Release(ctx, id, "1700000000000-0"); return err }},
			{"set result", func() error { return s.SetResult(ctx, id, "alice", admission.Result{Code: "paid"}) }},
			{"get result", func() error { _, err := s.GetResult(ctx, id, "alice"); return err }},
			{"append result", func() error { _, _, err := s.AppendResult(ctx, nil, id, "alice"); return err }},
			{"remaining", func() error { _, err := s.Remaining(ctx, id); return err }},
			{"held requests", func() error { _, err := s.HeldRequests(ctx, id); return err }},
			{"activity", func() error { _, err := s.Activity(ctx, id); return err }},
			{"delete", func() error { return s.Delete(ctx, id, true) }},
			{"ensure group", func() error { return s.EnsureGroup(ctx, id, "g") }},
			{"read group", func() error { _, err := s.ReadGroup(ctx, id, "g", "c", 10, 0, false); return err }},
			{"read pending", func() error { _, err := s.ReadGroup(ctx, id, "g", "c", 10, 0, true); return err }},
			{"claim", func() error { _, err := s.Claim(ctx, id, "g", "c", 0, 10); return err }},
			{"ack", func() error { return s.Ack(ctx, id, "g", w.ID) }},
			{"dead letter", func() error { return s.DeadLetter(ctx, id, "g", w, "x") }},
			{"dead letters", func() error { _, err := s.DeadLetters(ctx, id, 10); return err }},
			{"backlog", func() error { _, err := s.Backlog(ctx, id, "g"); return err }},
		} {
			wantOldLayout(t, id+": "+c.name, c.call(), "seckill", id)
		}
	}
	if after := keyDump(t, raw); after != before {
		t.Errorf("calls on the old activities wrote:\n%s\nwas\n%s", after, before)
	}

	// The scripts refuse too (a store that cached the activity as this build's, defined again
	// since by an earlier build, reaches them): each answers LAYOUT before any write.
	meta, bmeta := s.key("old", "meta"), s.key(bucketID("old-split", 0, 2), "meta")
	on := func(name string) string { return s.key("old", name) }
	for _, c := range []struct {
		name   string
		script *redis.Script
		keys   []string
		args   []any
	}{
		{"define.lua", s.define, []string{meta, on("stock")}, []any{10, 1, 1, 2, 3, "", "salt", "1", "ch", "old"}},
		{"admit.lua", s.admit, s.admitKeys("old"), []any{"bob", 1, "r2"}},
		{"replay.lua", scriptReplay, []string{meta, on("users"), on("orders")}, []any{"alice", "r1"}},
		{"release.lua", s.release, []string{meta, on("stock"), on("users"), on("released"), on("orders")}, []any{"1700000000000-0-1", "t", "ch", "old"}},
		{"set_result.lua", s.setResult, []string{meta, on("results"), on("users")}, []any{"alice", `{"code":"paid"}`, "", admission.MaxResultReservations}},
		{"delete.lua", s.del, []string{meta, on("stock")}, []any{"1"}},
		{"ensure_group.lua", s.ensureGroup, []string{meta, on("orders")}, []any{"g"}},
		{"read_new.lua", scriptReadNew, []string{meta, on("orders")}, []any{"g", "c", 10}},
		{"read_pending.lua", s.readPending, []string{meta, on("orders"), on("acked")}, []any{"g", "c", 10}},
		{"claim.lua", s.claim, []string{meta, on("orders"), on("acked")}, []any{"g", "c", 0, 10}},
		{"ack.lua", scriptAck, []string{meta, on("orders"), on("acked")}, []any{"g", "1700000000000-0", "1"}},
		{"dead_letter.lua", s.deadLetter, []string{meta, on("orders"), on("dead"), on("acked")}, []any{"g", "1700000000000-0", "1", "x"}},
		{"backlog.lua", scriptBacklog, []string{meta, on("orders"), on("acked")}, []any{"g"}},
		{"bucket_define.lua", scriptBucketDefine, []string{s.key("old-split", "meta"), s.intentsKey("old-split")},
			[]any{20, 1, 1, 2, 3, "", "salt", "1", 2, "raise-x", "gen"}},
		{"bucket_setup.lua", scriptBucketSetup, []string{bmeta, s.key(bucketID("old-split", 0, 2), "stock")}, []any{10, 1, 1, 2, 3, "salt", "g1"}},
		{"bucket_read.lua", scriptBucketRead, []string{bmeta, s.key(bucketID("old-split", 0, 2), "stock")}, nil},
		{"bucket_delete.lua", scriptBucketDelete, []string{s.key("old-split", "meta"), s.intentsKey("old-split")}, []any{"1", "delete"}},
	} {
		want := "old"
		if strings.HasPrefix(c.name, "bucket_") {
			want = "old-split"
		}
		err := c.script.Run(ctx, raw, c.keys, c.args...).Err()
		if err == nil || !strings.HasPrefix(err.Error(), layoutRefusal) {
			t.Errorf("%s on an old activity: %v, want %s...", c.name, err, layoutRefusal)
		}
		wantOldLayout(t, c.name, redisScriptErr(err), "seckill", want)
	}
	if after := keyDump(t, raw); after != before {
		t.Errorf("scripts on the old activities wrote:\n%s\nwas\n%s", after, before)
	}

	// The case itself: this store cached "again" as its own, and an earlier build deleted and
	// defined it again in its own layout: the admission script refuses, nothing is admitted.
	mustDefine(t, s, redisTestActivity("again", 10, 1))
	if d, err := s.Admit(ctx, admission.Request{Activity: "again", User: "u0", Qty: 1, RequestID: "r0"}); err != nil || d.Outcome != admission.Won {
		t.Fatalf("admit: %+v, %v", d, err)
	}
	if keys := raw.Keys(ctx, "seckill:{again}:*").Val(); len(keys) > 0 {
		if err := raw.Del(ctx, keys...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	writeOldActivity(t, raw, "seckill", "again", 1, true)
	_, err = s.Admit(ctx, admission.Request{Activity: "again", User: "u1", Qty: 1, RequestID: "r1"})
	wantOldLayout(t, "admit after a redefinition by an earlier build", err, "seckill", "again")
	if n := raw.Get(ctx, s.key("again", "stock")).Val(); n != strconv.Itoa(9) {
		t.Errorf("stock %s after the refused admission, want 9 (as the earlier build left it)", n)
	}

	// A split activity of this layout whose bucket lost its layout field: refused, naming the
	// parent.
	a := redisTestActivity("split", 8, 1)
	a.Buckets = 2
	mustDefine(t, s, a)
	for i := range 2 {
		if err := raw.HDel(ctx, s.key(bucketID("split", i, 2), "meta"), "layout").Err(); err != nil {
			t.Fatal(err)
		}
	}
	_, err = s.Admit(ctx, admission.Request{Activity: "split", User: "u", Qty: 1, RequestID: "r"})
	wantOldLayout(t, "admit on buckets without layout 2", err, "seckill", "split")
}

// TestRedisNewMalformedBucketCount: New's look at the activities reads a split parent's count as
// bucketCount does: a count out of bounds (here a hundred million) is not expanded into bucket ids
// at start-up, and a call on the activity is refused as malformed, writing nothing.
func TestRedisNewMalformedBucketCount(t *testing.T) {
	ctx := context.Background()
	srv := testsrv.StartRedis(t)
	raw := rawClient(t, srv)
	s, err := New(redis.NewClient(&redis.Options{Addr: srv.Addr}), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	split := redisTestActivity("huge", 10, 1)
	split.Buckets = 2
	mustDefine(t, s, split)
	if err := raw.HSet(ctx, "seckill:{huge}:meta", "buckets", "100000000").Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s2, err := New(redis.NewClient(&redis.Options{Addr: srv.Addr}), Options{})
	if err != nil {
		t.Fatalf("new store beside a malformed count: %v", err)
	}
	t.Cleanup(func() { _ = s2.Close() })
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("New took %v: it expanded the malformed count", d)
	}
	if _, err := s2.Admit(ctx, admission.Request{Activity: "huge", User: "u", Qty: 1, RequestID: "r"}); err == nil || !strings.Contains(err.Error(), "malformed bucket count") {
		t.Errorf("admit on a malformed count: %v, want the malformed count refused", err)
	}
}
