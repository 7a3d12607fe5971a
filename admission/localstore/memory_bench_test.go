package localstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// BenchmarkMemoryAdmitWon measures a winning admission: every iteration is a new user taking one
// item from a stock that never runs out.
func BenchmarkMemoryAdmitWon(b *testing.B) {
	s := newMemory(b, nil)
	mustDefine(b, s, openAt(time.Now(), "bench", 1<<62, 1))
	users := make([]string, b.N)
	for i := range users {
		users[i] = "user-" + strconv.Itoa(i)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d, err := s.Admit(ctx, admission.Request{Activity: "bench", User: users[i], Qty: 1, RequestID: "r"})
		if err != nil || d.Outcome != admission.Won {
			b.Fatalf("admit = %+v, %v", d, err)
		}
	}
}

// soldOutStore returns a store whose activity "bench" is sold out.
func soldOutStore(b *testing.B) *Memory {
	s := newMemory(b, nil)
	mustDefine(b, s, openAt(time.Now(), "bench", 1, 1))
	mustAdmit(b, s, "bench", "winner", 1, "r")
	return s
}

// BenchmarkMemoryAdmitSoldOut measures the store's rejection after the sell-out; it must not
// allocate.
func BenchmarkMemoryAdmitSoldOut(b *testing.B) {
	s := soldOutStore(b)
	ctx := context.Background()
	r := admission.Request{Activity: "bench", User: "loser", Qty: 1, RequestID: "r"}
	b.ReportAllocs()
	for b.Loop() {
		if d, err := s.Admit(ctx, r); err != nil || d.Outcome != admission.SoldOut {
			b.Fatalf("admit = %+v, %v", d, err)
		}
	}
}

// BenchmarkMemoryAdmitSoldOutParallel is the same rejection from every core on one activity: the
// activity's mutex is the contended resource.
func BenchmarkMemoryAdmitSoldOutParallel(b *testing.B) {
	s := soldOutStore(b)
	ctx := context.Background()
	r := admission.Request{Activity: "bench", User: "loser", Qty: 1, RequestID: "r"}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if d, err := s.Admit(ctx, r); err != nil || d.Outcome != admission.SoldOut {
				b.Errorf("admit = %+v, %v", d, err)
				return
			}
		}
	})
}

// BenchmarkGuardAdmitSoldOut measures the Guard's answer once its sold-out flag is set: no store
// call, no lock, no allocation.
func BenchmarkGuardAdmitSoldOut(b *testing.B) {
	g := admission.NewGuard(soldOutStore(b), admission.GuardOptions{})
	ctx := context.Background()
	r := admission.Request{Activity: "bench", User: "loser", Qty: 1, RequestID: "r"}
	if d, err := g.Admit(ctx, r); err != nil || d.Outcome != admission.SoldOut || !g.SoldOut("bench") {
		b.Fatalf("first rejection = %+v, %v; flag %v", d, err, g.SoldOut("bench"))
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if d, err := g.Admit(ctx, r); err != nil || d.Outcome != admission.SoldOut {
				b.Errorf("admit = %+v, %v", d, err)
				return
			}
		}
	})
}
