package redisstore_test

import (
	"context"
	"testing"

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
