package main

import (
	"math"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"
)

func TestHistogramBucketsCoverEveryValue(t *testing.T) {
	for _, bits := range []uint{5, 7} {
		h := NewHistogram(bits)
		prev := -1
		check := func(v uint64) {
			i := h.index(v)
			lo, hi := h.bounds(i)
			if v < lo || v > hi {
				t.Fatalf("subBits %d: value %d in bucket %d [%d, %d]", bits, v, i, lo, hi)
			}
			if i < prev {
				t.Fatalf("subBits %d: index not monotonic at %d", bits, v)
			}
			if width, limit := float64(hi-lo+1), math.Max(1, float64(v)/float64(uint64(1)<<(bits-1))); width > limit {
				t.Fatalf("subBits %d: bucket of %d is %v wide, want at most %v", bits, v, width, limit)
			}
			prev = i
		}
		for v := uint64(0); v < 100000; v++ {
			check(v)
		}
		for v := uint64(100000); v < 1<<maxRecordableBits; v = v*11/10 + 1 {
			check(v)
		}
		if got, want := h.index(1<<maxRecordableBits-1), len(h.counts)-1; got != want {
			t.Fatalf("largest value in bucket %d, want the last one %d", got, want)
		}
	}
}

func TestHistogramExactBelowSubBuckets(t *testing.T) {
	h := NewHistogram(7)
	for v := 1; v <= 100; v++ {
		h.Record(time.Duration(v) * time.Microsecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.01, 1}, {0.5, 50}, {0.99, 99}, {1, 100}} {
		if got := h.Quantile(c.q); got != c.want*time.Microsecond {
			t.Errorf("Quantile(%v) = %v, want %v", c.q, got, c.want*time.Microsecond)
		}
	}
	if h.Min() != time.Microsecond || h.Max() != 100*time.Microsecond || h.Count() != 100 {
		t.Errorf("min %v max %v count %d", h.Min(), h.Max(), h.Count())
	}
	if h.Mean() != 50*time.Microsecond { // 5050/100, truncated
		t.Errorf("mean %v", h.Mean())
	}
}

// The histogram's percentiles match a sorted sample to within one bucket (1/64 for 7 bits),
// always on the slow side, for a long-tailed distribution like real latencies.
func TestHistogramPercentilesMatchSortedSample(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	h := NewHistogram(7)
	var sample []float64
	for i := 0; i < 200000; i++ {
		us := math.Exp(rng.NormFloat64()*1.2 + 7) // log-normal around 1 ms
		if rng.IntN(1000) == 0 {
			us *= 100 // a tail of stalls
		}
		d := time.Duration(us) * time.Microsecond
		sample = append(sample, float64(d/time.Microsecond))
		h.Record(d)
	}
	sort.Float64s(sample)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999, 1} {
		exact := sample[int(math.Ceil(q*float64(len(sample))))-1]
		got := float64(h.Quantile(q) / time.Microsecond)
		if got < exact || got > exact*(1+1.0/64)+1 {
			t.Errorf("p%v: histogram %v µs, sorted sample %v µs", q*100, got, exact)
		}
	}
}

func TestHistogramConcurrentRecordAndMerge(t *testing.T) {
	h := NewHistogram(7)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; i <= 1000; i++ {
				h.Record(time.Duration(i) * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	if h.Count() != 8000 || h.Max() != time.Second || h.Min() != time.Millisecond {
		t.Fatalf("count %d max %v min %v", h.Count(), h.Max(), h.Min())
	}
	m := NewHistogram(7)
	m.Record(5 * time.Second)
	m.Merge(h)
	if m.Count() != 8001 || m.Max() != 5*time.Second || m.Min() != time.Millisecond {
		t.Fatalf("merged: count %d max %v min %v", m.Count(), m.Max(), m.Min())
	}
	if p := m.Quantile(0.5); p < 490*time.Millisecond || p > 510*time.Millisecond {
		t.Fatalf("merged p50 %v", p)
	}
}

func TestHistogramEmpty(t *testing.T) {
	h := NewHistogram(5)
	if h.Quantile(0.99) != 0 || h.Max() != 0 || h.Min() != 0 || h.Mean() != 0 {
		t.Fatal("an empty histogram reports values")
	}
}
