package redisstore_test

import (
	"context"
	"testing"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestRedisAdmitHashTables: a call with a win leaves the hashes a win writes as hash tables (a
// listpack is searched linearly), holding only their own fields, also when :buyers is created
// again after its last holder released and when another hash was a listpack with fields before.
func TestRedisAdmitHashTables(t *testing.T) {
	ctx := context.Background()
	srv := testsrv.StartRedis(t)
	s, raw := redisTestStore(t, srv.Addr, redisstore.Options{}, nil)
	redisDefine(t, s, redisOpen("ht", 10, 1))
	const p = "seckill:{ht}:"
	hashes := []string{p + "buyers", p + "req", p + "resv", p + "results"}
	check := func(when string, fields ...int64) {
		t.Helper()
		for i, k := range hashes {
			if enc := raw.ObjectEncoding(ctx, k).Val(); enc != "hashtable" {
				t.Errorf("%s: %s is %q, want hashtable", when, k, enc)
			}
			keys, err := raw.HKeys(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(keys)) != fields[i] {
				t.Errorf("%s: %s has %d fields %q, want %d", when, k, len(keys), keys, fields[i])
			}
			for _, f := range keys {
				if f == "" || f[0] == 0 {
					t.Errorf("%s: %s keeps the padding field (%d bytes)", when, k, len(f))
				}
			}
		}
	}

	// A record written before any win (by SetResult) makes :results a listpack with a field.
	if err := s.SetResult(ctx, "ht", "early", admission.Result{Code: "failed"}); err != nil {
		t.Fatal(err)
	}
	if enc := raw.ObjectEncoding(ctx, p+"results").Val(); enc != "listpack" {
		t.Fatalf(":results is %q before the first win, want listpack (the case this test is about)", enc)
	}
	d := redisAdmit(t, s, "ht", "u1", "r1")
	if d.Outcome != admission.Won {
		t.Fatalf("u1: %+v", d)
	}
	check("after the first win", 1, 1, 1, 2)
	if r, err := s.GetResult(ctx, "ht", "early"); err != nil || r.Code != "failed" {
		t.Errorf("early's record after the conversion: %+v, %v", r, err)
	}
	if r, err := s.GetResult(ctx, "ht", "u1"); err != nil || r.Code != "queued" || r.ReservationID != d.ReservationID {
		t.Errorf("u1's record: %+v, %v", r, err)
	}

	// A refusal and a replay write no field.
	if d2 := redisAdmit(t, s, "ht", "u1", "r2"); d2.Outcome != admission.LimitReached {
		t.Fatalf("u1 again: %+v", d2)
	}
	if d2 := redisAdmit(t, s, "ht", "u1", "r1"); !d2.Replayed || d2.ReservationID != d.ReservationID {
		t.Fatalf("u1 replay: %+v", d2)
	}
	check("after a refusal and a replay", 1, 1, 1, 2)

	// The last holder's release deletes :buyers; the next win creates it again.
	if ok, err := s.Release(ctx, "ht", d.ReservationID); err != nil || !ok {
		t.Fatalf("release: %v, %v", ok, err)
	}
	if n := raw.Exists(ctx, p+"buyers").Val(); n != 0 {
		t.Fatalf(":buyers exists after the last release")
	}
	if d := redisAdmit(t, s, "ht", "u2", "r1"); d.Outcome != admission.Won {
		t.Fatalf("u2: %+v", d)
	}
	check("after a win that created :buyers again", 1, 2, 2, 3)
	if h, err := s.Holders(ctx, "ht"); err != nil || len(h) != 1 || h[0] != "u2" {
		t.Errorf("holders: %q, %v", h, err)
	}
}
