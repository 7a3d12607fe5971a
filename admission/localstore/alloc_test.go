//go:build !race

package localstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// The race detector allocates on its own, so these run without it.

func TestMemorySoldOutAllocationFree(t *testing.T) {
	s := newMemory(t, nil)
	mustDefine(t, s, openAt(time.Now(), "a", 1, 1))
	mustAdmit(t, s, "a", "winner", 1, "r")
	ctx := context.Background()
	r := admission.Request{Activity: "a", User: "a-rather-long-user-id-from-a-jwt-subject-claim", Qty: 1, RequestID: "a-long-idempotency-key-0123456789"}
	if n := testing.AllocsPerRun(1000, func() {
		if d, _ := s.Admit(ctx, r); d.Outcome != admission.SoldOut {
			t.Fatalf("outcome %v", d.Outcome)
		}
	}); n != 0 {
		t.Errorf("sold-out admission allocates %.1f times", n)
	}
	g := admission.NewGuard(s, admission.GuardOptions{})
	if d, _ := g.Admit(ctx, r); d.Outcome != admission.SoldOut {
		t.Fatalf("guard outcome %v", d.Outcome)
	}
	if n := testing.AllocsPerRun(1000, func() { _, _ = g.Admit(ctx, r) }); n != 0 {
		t.Errorf("flagged guard admission allocates %.1f times", n)
	}
}

// TestLocalSoldOutAllocationFree: the durable store adds nothing to the sold-out rush's
// allocations, the call through its forwarding helper included (docs/admission.md).
func TestLocalSoldOutAllocationFree(t *testing.T) {
	s := openLocal(t, t.TempDir(), nil)
	defer s.Close()
	mustDefine(t, s, openAt(time.Now(), "a", 1, 1))
	mustAdmit(t, s, "a", "winner", 1, "r")
	ctx := context.Background()
	r := admission.Request{Activity: "a", User: "a-rather-long-user-id-from-a-jwt-subject-claim", Qty: 1, RequestID: "a-long-idempotency-key-0123456789"}
	if n := testing.AllocsPerRun(1000, func() {
		if d, err := s.Admit(ctx, r); err != nil || d.Outcome != admission.SoldOut {
			t.Fatalf("admit = %+v, %v", d, err)
		}
	}); n != 0 {
		t.Errorf("sold-out admission allocates %.1f times", n)
	}
}

// TestMemoryWinAllocationFree: a new user's win allocates nothing of its own (the user, its
// entry and their strings go into blocks and arena chunks that thousands of wins share), so the
// sale's growing state adds no objects for the collector to track (docs/admission.md).
func TestMemoryWinAllocationFree(t *testing.T) {
	s := newMemory(t, nil)
	mustDefine(t, s, openAt(time.Now(), "a", 1<<40, 1))
	ctx := context.Background()
	const runs = 20_000
	users := make([]string, runs+1) // AllocsPerRun calls once more to warm up
	for i := range users {
		users[i] = "user-" + strconv.Itoa(i)
	}
	i := 0
	if n := testing.AllocsPerRun(runs, func() {
		d, err := s.Admit(ctx, admission.Request{Activity: "a", User: users[i], Qty: 1, RequestID: "0f8fad5b-d9cb-469f-a165-70867728950e"})
		if err != nil || d.Outcome != admission.Won {
			t.Fatalf("admit = %+v, %v", d, err)
		}
		i++
	}); n != 0 {
		t.Errorf("a new user's win allocates %.1f times", n)
	}
}
