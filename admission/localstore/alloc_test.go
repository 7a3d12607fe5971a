//go:build !race

package localstore

import (
	"context"
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
