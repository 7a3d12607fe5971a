package localstore

import (
	"context"
	"math"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// BenchmarkMemoryAdmitWonSeen measures a win from a new user, and the order backend's result for
// it (SetResult, as a sale has for every winner), once the activity has seen a number of users
// already, and what the collector costs meanwhile: the heap each win keeps (heap-B/win,
// live heap after a collection), the GC's CPU per win (gc-ns/win, runtime/metrics
// /cpu/classes/gc/total, marking included) and the collections' count. A win's cost should not grow
// with the users seen, and the collector should not have to scan what they left behind
// (docs/BENCHMARKS.md, "Where the tail and a Redis buy's time go").
func BenchmarkMemoryAdmitWonSeen(b *testing.B) {
	for _, seen := range []int{0, 250_000, 1_250_000} {
		b.Run("seen="+strconv.Itoa(seen), func(b *testing.B) {
			s := newMemory(b, nil)
			mustDefine(b, s, openAt(time.Now(), "bench", 1<<62, 1))
			ctx := context.Background()
			payBefore := time.Now().Add(15 * time.Minute).UnixMilli()
			admit := func(user, req, order string) {
				d, err := s.Admit(ctx, admission.Request{Activity: "bench", User: user, Qty: 1, RequestID: req})
				if err != nil || d.Outcome != admission.Won {
					b.Fatalf("admit = %+v, %v", d, err)
				}
				r := admission.Result{Code: "pending_payment", ReservationID: d.ReservationID, OrderID: order, PayBeforeMS: payBefore}
				if err := s.SetResult(ctx, "bench", user, r); err != nil {
					b.Fatal(err)
				}
			}
			// Users, request ids and order ids as the gateway and the order backend have them:
			// strings of their own, and an idempotency key as long as a UUID.
			const key = "0f8fad5b-d9cb-469f-a165-70867728950e"
			heap0 := liveHeap()
			for i := range seen {
				admit("seen-user-"+strconv.Itoa(i), key+strconv.Itoa(i), "seen-order-"+strconv.Itoa(i))
			}
			heap1 := liveHeap()
			users := make([]string, b.N)
			reqs := make([]string, b.N)
			orders := make([]string, b.N)
			for i := range users {
				users[i] = "user-" + strconv.Itoa(i)
				reqs[i] = key + strconv.Itoa(i)
				orders[i] = "order-" + strconv.Itoa(i)
			}
			gc0, n0 := gcCPU()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				admit(users[i], reqs[i], orders[i])
			}
			b.StopTimer()
			gc1, n1 := gcCPU()
			b.ReportMetric((gc1-gc0)*1e9/float64(b.N), "gc-ns/win")
			b.ReportMetric(float64(n1-n0), "GCs")
			if seen > 0 {
				b.ReportMetric(float64(heap1-heap0)/float64(seen), "heap-B/win")
			}
			runtime.KeepAlive(s)
		})
	}
}

// liveHeap returns the bytes of live heap objects after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// gcCPU returns the CPU seconds the collector has used so far (runtime/metrics, an estimate the
// runtime keeps) and the collections completed.
func gcCPU() (float64, uint64) {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Float64(), s[1].Value.Uint64()
}

// BenchmarkMemoryAdmitWonBusy is the gateway's situation in a store benchmark: 64 goroutines per
// core buy as new users in one activity that has seen 1.25 M users, each buy also allocating the
// 4 KiB of short-lived garbage a request leaves (so the collector runs as often as in a gateway),
// and every win, seen ones included, getting the order backend's result (SetResult).
// Beside the time per win it reports, over the timed part, the 99th percentile of a win's own
// latency (p99-µs), of the scheduler's latency (sched-p99-µs, runtime/metrics
// /sched/latencies:seconds: runnable goroutines waiting for a P) and of the GC's stop-the-world
// pauses (pause-p99-µs, /sched/pauses/total/gc:seconds), and the GC's CPU per win.
func BenchmarkMemoryAdmitWonBusy(b *testing.B) {
	const seen = 1_250_000
	s := newMemory(b, nil)
	mustDefine(b, s, openAt(time.Now(), "bench", 1<<62, 1))
	ctx := context.Background()
	const key = "0f8fad5b-d9cb-469f-a165-70867728950e"
	payBefore := time.Now().Add(15 * time.Minute).UnixMilli()
	result := func(user, order string, d admission.Decision) error {
		return s.SetResult(ctx, "bench", user, admission.Result{Code: "pending_payment", ReservationID: d.ReservationID, OrderID: order, PayBeforeMS: payBefore})
	}
	for i := range seen {
		user := "seen-user-" + strconv.Itoa(i)
		d, err := s.Admit(ctx, admission.Request{Activity: "bench", User: user, Qty: 1, RequestID: key + strconv.Itoa(i)})
		if err == nil {
			err = result(user, "seen-order-"+strconv.Itoa(i), d)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	users := make([]string, b.N)
	reqs := make([]string, b.N)
	orders := make([]string, b.N)
	for i := range users {
		users[i] = "user-" + strconv.Itoa(i)
		reqs[i] = key + strconv.Itoa(i)
		orders[i] = "order-" + strconv.Itoa(i)
	}
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	runtime.GC()
	hist := []metrics.Sample{{Name: "/sched/latencies:seconds"}, {Name: "/sched/pauses/total/gc:seconds"}}
	metrics.Read(hist)
	// Read reuses a histogram's storage: keep copies of the counts before.
	sched0, pause0 := cloneHist(hist[0].Value.Float64Histogram()), cloneHist(hist[1].Value.Float64Histogram())
	gc0, n0 := gcCPU()
	b.SetParallelism(64)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1) - 1
			t0 := time.Now()
			garbage = make([]byte, 4096)
			d, err := s.Admit(ctx, admission.Request{Activity: "bench", User: users[i], Qty: 1, RequestID: reqs[i]})
			lat[i] = time.Since(t0)
			if err != nil || d.Outcome != admission.Won {
				b.Errorf("admit = %+v, %v", d, err)
				return
			}
			if err := result(users[i], orders[i], d); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	gc1, n1 := gcCPU()
	metrics.Read(hist)
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(histQuantile(sched0, hist[0].Value.Float64Histogram(), 0.99)*1e6, "sched-p99-µs")
	b.ReportMetric(histQuantile(pause0, hist[1].Value.Float64Histogram(), 0.99)*1e6, "pause-p99-µs")
	b.ReportMetric((gc1-gc0)*1e9/float64(b.N), "gc-ns/win")
	b.ReportMetric(float64(n1-n0), "GCs")
}

// garbage is where BenchmarkMemoryAdmitWonBusy drops its per-buy garbage, so it is allocated.
var garbage []byte

// histQuantile returns quantile q of what histogram h1 counted since h0 (the upper bound of the
// bucket it falls in; 0 when nothing was counted).
func histQuantile(h0, h1 *metrics.Float64Histogram, q float64) float64 {
	var total uint64
	for i := range h1.Counts {
		total += h1.Counts[i] - h0.Counts[i]
	}
	if total == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(total)))
	var sum uint64
	for i := range h1.Counts {
		if sum += h1.Counts[i] - h0.Counts[i]; sum >= want {
			return h1.Buckets[i+1]
		}
	}
	return h1.Buckets[len(h1.Buckets)-1]
}

// cloneHist returns a copy of h that a later metrics.Read does not overwrite.
func cloneHist(h *metrics.Float64Histogram) *metrics.Float64Histogram {
	return &metrics.Float64Histogram{Counts: slices.Clone(h.Counts), Buckets: slices.Clone(h.Buckets)}
}
