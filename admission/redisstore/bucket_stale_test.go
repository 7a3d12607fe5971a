package redisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestRedisStaleBucketCount: node A served x unsplit and remembers a count of 1; node B deletes
// x and defines it again split in 2 buckets. Every call of A on x must find the split (the parent
// answers unknown to a call that takes it for unsplit, which makes A look the count up again):
// found in review, A's release answered not found (an item never sold again), its queue read
// an empty stray stream, its result record went to a stray key that outlived the delete.
func TestRedisStaleBucketCount(t *testing.T) {
	ctx := context.Background()
	srv := testsrv.StartRedis(t)
	opts := redisstore.Options{RebalanceInterval: -1}
	// stale returns the two nodes and B's win in an activity of its own (named after the test);
	// readFirst has A read x's queue before the delete.
	stale := func(t *testing.T, readFirst bool) (a, b *redisstore.Store, id string, win admission.Decision) {
		a, _ = redisTestStore(t, srv.Addr, opts, nil)
		b, _ = redisTestStore(t, srv.Addr, opts, nil)
		id = strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
		redisDefine(t, a, redisOpen(id, 10, 1))
		redisAdmit(t, a, id, "warm", "r0") // A's count: 1
		if readFirst {
			if err := a.EnsureGroup(ctx, id, "g"); err != nil {
				t.Fatal(err)
			}
			if ws, err := a.ReadGroup(ctx, id, "g", "c", 10, 0, false); err != nil || len(ws) != 1 {
				t.Fatalf("read before the delete: %+v, %v", ws, err)
			}
		}
		if err := b.Delete(ctx, id, true); err != nil {
			t.Fatal(err)
		}
		sp := redisOpen(id, 10, 1)
		sp.Buckets = 2
		redisDefine(t, b, sp)
		if win = redisAdmit(t, b, id, "u1", "r1"); win.Outcome != admission.Won {
			t.Fatalf("admit: %+v", win)
		}
		return a, b, id, win
	}

	t.Run("release", func(t *testing.T) {
		a, b, id, win := stale(t, false)
		if ok, err := a.Release(ctx, id, win.ReservationID); err != nil || !ok {
			t.Fatalf("release by the stale node: %v, %v; want released", ok, err)
		}
		if n, err := b.Remaining(ctx, id); err != nil || n != 10 {
			t.Errorf("remaining %d, %v after the release; want 10", n, err)
		}
	})
	t.Run("queue", func(t *testing.T) {
		a, _, id, win := stale(t, false)
		if err := a.EnsureGroup(ctx, id, "g"); err != nil {
			t.Fatal(err)
		}
		wins, err := a.ReadGroup(ctx, id, "g", "c", 10, 10*time.Millisecond, false)
		if err != nil || len(wins) != 1 || wins[0].ReservationID != win.ReservationID {
			t.Fatalf("read by the stale node: %+v, %v; want the win %s", wins, err, win.ReservationID)
		}
		if err := a.Ack(ctx, id, "g", wins[0].ID); err != nil {
			t.Fatal(err)
		}
		if n, err := a.Backlog(ctx, id, "g"); err != nil || n != 0 {
			t.Errorf("backlog %d, %v after the ack; want 0", n, err)
		}
	})
	t.Run("read after a read", func(t *testing.T) {
		// A read x's queue before the delete and makes no group after it: its read of the
		// parent's stream must answer unknown (the parent's buckets field), not a missing group.
		a, b, id, win := stale(t, true)
		if err := b.EnsureGroup(ctx, id, "g"); err != nil {
			t.Fatal(err)
		}
		wins, err := a.ReadGroup(ctx, id, "g", "c", 10, 0, false)
		if err != nil || len(wins) != 1 || wins[0].ReservationID != win.ReservationID {
			t.Fatalf("read by the stale node: %+v, %v; want the win %s", wins, err, win.ReservationID)
		}
	})
	t.Run("ack", func(t *testing.T) {
		a, b, id, win := stale(t, false)
		if err := b.EnsureGroup(ctx, id, "g"); err != nil {
			t.Fatal(err)
		}
		wins, err := b.ReadGroup(ctx, id, "g", "c", 10, 0, false)
		if err != nil || len(wins) != 1 || wins[0].ReservationID != win.ReservationID {
			t.Fatalf("read: %+v, %v", wins, err)
		}
		if err := a.Ack(ctx, id, "g", wins[0].ID); err != nil {
			t.Fatal(err)
		}
		if n, err := b.Backlog(ctx, id, "g"); err != nil || n != 0 {
			t.Errorf("backlog %d, %v after the stale node's ack; want 0", n, err)
		}
	})
	t.Run("result", func(t *testing.T) {
		a, b, id, win := stale(t, false)
		rec := admission.Result{Code: "pending_payment", ReservationID: win.ReservationID, OrderID: "o1"}
		if err := a.SetResult(ctx, id, "u1", rec); err != nil {
			t.Fatal(err)
		}
		if r, err := b.GetResult(ctx, id, "u1"); err != nil || r.Code != "pending_payment" {
			t.Errorf("result seen by another node: %+v, %v; want pending_payment", r, err)
		}
	})
}
