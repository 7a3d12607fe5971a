package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestRedisStoredResultsTakeFastPath checks that what admit.lua and SetResult store is in the
// encoding the poll hands on as it is: otherwise every poll would silently decode and encode.
func TestRedisStoredResultsTakeFastPath(t *testing.T) {
	srv := testsrv.StartRedis(t)
	ctx := context.Background()
	s, err := New(redis.NewClient(&redis.Options{Addr: srv.Addr}), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	if _, err := s.Define(ctx, admission.Activity{ID: "a", Stock: 10, Limit: 1, Start: now.Add(-time.Minute), End: now.Add(time.Hour), PayWithin: time.Minute}, false); err != nil {
		t.Fatal(err)
	}
	d, err := s.Admit(ctx, admission.Request{Activity: "a", User: "alice", Qty: 1, RequestID: "r"})
	if err != nil || d.Outcome != admission.Won {
		t.Fatalf("admit: %+v, %v", d, err)
	}
	stored := func() string {
		t.Helper()
		v, err := s.client.HGet(ctx, s.key("a", "results"), "alice").Result()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := stored(); !handedOnAsStored(v) {
		t.Errorf("admit.lua stored %q, which the fast path does not take", v)
	}
	if err := s.SetResult(ctx, "a", "alice", admission.Result{Code: "pending_payment", ReservationID: d.ReservationID, OrderID: "o-1", PayBeforeMS: 1764441234567}); err != nil {
		t.Fatal(err)
	}
	if v := stored(); !handedOnAsStored(v) {
		t.Errorf("SetResult stored %q, which the fast path does not take", v)
	}
}

// handedOnAsStored reports whether a poll hands on the stored record byte for byte: it is
// already in encoding/json's encoding of a Result.
func handedOnAsStored(v string) bool {
	out, _, err := admission.AppendStoredResult(nil, v)
	return err == nil && string(out) == v
}
