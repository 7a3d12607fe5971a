package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestRedisStoredResultsTakeFastPath checks that the records set_result.lua stores, SetResult's
// and the "queued" records of wins it writes first (record_win), are in the encoding the poll
// hands on as it is: otherwise every poll would silently decode and encode.
func TestRedisStoredResultsTakeFastPath(t *testing.T) {
	srv := testsrv.StartRedis(t)
	ctx := context.Background()
	s, err := New(redis.NewClient(&redis.Options{Addr: srv.Addr}), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	if _, err := s.Define(ctx, admission.Activity{ID: "a", Stock: 10, Limit: 2, Start: now.Add(-time.Minute), End: now.Add(time.Hour), PayWithin: time.Minute}, false); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range []string{"r1", "r2"} {
		d, err := s.Admit(ctx, admission.Request{Activity: "a", User: "alice", Qty: 1, RequestID: r})
		if err != nil || d.Outcome != admission.Won {
			t.Fatalf("admit: %+v, %v", d, err)
		}
		ids = append(ids, d.ReservationID)
	}
	if err := s.SetResult(ctx, "a", "alice", admission.Result{Code: "pending_payment", ReservationID: ids[0], OrderID: "o-1", PayBeforeMS: 1764441234567}); err != nil {
		t.Fatal(err)
	}
	// alice's latest record is her second win's queued one (still in flight), written by
	// record_win; her first's is SetResult's.
	for _, f := range []string{"alice", "alice\x00" + ids[0], "alice\x00" + ids[1]} {
		v, err := s.client.HGet(ctx, s.key("a", "results"), f).Result()
		if err != nil {
			t.Fatalf("results field %q: %v", f, err)
		}
		if !handedOnAsStored(v) {
			t.Errorf("results field %q holds %q, which the fast path does not take", f, v)
		}
	}
}

// handedOnAsStored reports whether a poll hands on the stored record byte for byte: it is
// already in encoding/json's encoding of a Result.
func handedOnAsStored(v string) bool {
	out, _, err := admission.AppendStoredResult(nil, v)
	return err == nil && string(out) == v
}
