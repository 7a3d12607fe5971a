package localstore

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// BenchmarkLocalAdmitWon measures a winning admission from 64 concurrent callers (32 per core on
// this project's two cores): Memory, and Store with group commit, with and without
// fsync. Every call is a new user taking one item from a stock that never runs out. wins/commit is
// the mean group-commit batch. local-10-activities spreads the wins over ten activities, as the
// gateway benchmarks do (seckill-bench, scripts/bench-wrk.sh).
func BenchmarkLocalAdmitWon(b *testing.B) {
	for _, bc := range []struct {
		name string
		acts int
		open func(b *testing.B) (admission.Store, *localWriter)
	}{
		{"memory", 1, func(b *testing.B) (admission.Store, *localWriter) { return newMemory(b, nil), nil }},
		{"local", 1, func(b *testing.B) (admission.Store, *localWriter) {
			s := openLocal(b, b.TempDir(), nil)
			return s, s.cur.Load().w
		}},
		{"local-10-activities", 10, func(b *testing.B) (admission.Store, *localWriter) {
			s := openLocal(b, b.TempDir(), nil)
			return s, s.cur.Load().w
		}},
		{"local-fsync-always", 1, func(b *testing.B) (admission.Store, *localWriter) {
			s, err := Open(b.TempDir(), Options{FsyncAlways: true})
			if err != nil {
				b.Fatal(err)
			}
			return s, s.cur.Load().w
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s, w := bc.open(b)
			defer s.Close()
			for a := range bc.acts {
				mustDefine(b, s, openAt(time.Now(), "bench-"+strconv.Itoa(a), 1<<62, 1))
			}
			ctx := context.Background()
			var next atomic.Int64
			var commits0 uint64
			if w != nil {
				commits0 = w.commits.Load()
			}
			b.SetParallelism(32)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					n := next.Add(1)
					user := "user-" + strconv.FormatInt(n, 10)
					act := "bench-" + strconv.Itoa(int(n%int64(bc.acts)))
					d, err := s.Admit(ctx, admission.Request{Activity: act, User: user, Qty: 1, RequestID: "r"})
					if err != nil || d.Outcome != admission.Won {
						b.Errorf("admit = %+v, %v", d, err)
						return
					}
				}
			})
			b.StopTimer()
			if w != nil {
				if c := w.commits.Load() - commits0; c > 0 {
					b.ReportMetric(float64(b.N)/float64(c), "wins/commit")
				}
			}
		})
	}
}

// BenchmarkLocalAdmitSoldOut is the rejection after the sell-out from 64 callers: nothing to
// commit, so no caller waits for the writer.
func BenchmarkLocalAdmitSoldOut(b *testing.B) {
	s := openLocal(b, b.TempDir(), nil)
	defer s.Close()
	mustDefine(b, s, openAt(time.Now(), "bench", 1, 1))
	mustAdmit(b, s, "bench", "winner", 1, "r")
	ctx := context.Background()
	r := admission.Request{Activity: "bench", User: "loser", Qty: 1, RequestID: "r"}
	b.SetParallelism(32)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if d, err := s.Admit(ctx, r); err != nil || d.Outcome != admission.SoldOut {
				b.Errorf("admit = %+v, %v", d, err)
				return
			}
		}
	})
}

// BenchmarkLocalCommit is one caller's wins, one after the other: each is a commit of its own, so
// ns/op and cpu-ns/op are what one commit costs (SQLite's locks, the WAL frame, the wake).
func BenchmarkLocalCommit(b *testing.B) {
	s := openLocal(b, b.TempDir(), nil)
	defer s.Close()
	mustDefine(b, s, openAt(time.Now(), "bench", 1<<62, 1))
	ctx := context.Background()
	b.ReportAllocs()
	cpu0 := testsrv.ProcessCPU(b)
	b.ResetTimer()
	for i := range b.N {
		d, err := s.Admit(ctx, admission.Request{Activity: "bench", User: "user-" + strconv.Itoa(i), Qty: 1, RequestID: "r"})
		if err != nil || d.Outcome != admission.Won {
			b.Fatalf("admit = %+v, %v", d, err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(testsrv.ProcessCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
}
