package main

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// Histogram is a log-linear latency histogram in the style of HdrHistogram: values (microseconds)
// below 2^subBits are counted exactly, larger ones in buckets whose width is at most 2^-(subBits-1)
// of their value. Record is lock-free, so every worker can share one.
type Histogram struct {
	subBits uint
	counts  []atomic.Uint64
	total   atomic.Uint64
	sum     atomic.Uint64 // microseconds
	max     atomic.Uint64
	min     atomic.Uint64 // stored as ^v so that the zero value means "none yet"
}

// maxRecordable is the largest value a Histogram keeps apart (2^36 µs, about 19 hours); larger
// values land in the last bucket.
const maxRecordableBits = 36

// NewHistogram returns a histogram with the given precision: 7 sub-bucket bits give buckets at
// most 1/64 (1.6%) wide; 5 give 1/16 (6%), enough for a chart.
func NewHistogram(subBits uint) *Histogram {
	h := &Histogram{subBits: subBits}
	h.counts = make([]atomic.Uint64, h.index(1<<maxRecordableBits-1)+1)
	return h
}

// index maps a value to its bucket. Values below 2^subBits map to themselves; above, each power of
// two is split in 2^(subBits-1) equal buckets.
func (h *Histogram) index(v uint64) int {
	sub := uint64(1) << h.subBits
	if v < sub {
		return int(v)
	}
	if v >= 1<<maxRecordableBits {
		v = 1<<maxRecordableBits - 1
	}
	shift := uint(bits.Len64(v)) - h.subBits
	return int(uint64(shift)*(sub/2) + v>>shift)
}

// bounds returns the smallest and largest value of bucket i.
func (h *Histogram) bounds(i int) (lo, hi uint64) {
	sub := 1 << h.subBits
	if i < sub {
		return uint64(i), uint64(i)
	}
	half := sub / 2
	shift := uint(i/half - 1)
	m := uint64(i - int(shift)*half)
	return m << shift, (m+1)<<shift - 1
}

// Record adds one latency.
func (h *Histogram) Record(d time.Duration) {
	us := uint64(0)
	if d > 0 {
		us = uint64(d / time.Microsecond)
	}
	h.counts[h.index(us)].Add(1)
	h.total.Add(1)
	h.sum.Add(us)
	for {
		m := h.max.Load()
		if us <= m || h.max.CompareAndSwap(m, us) {
			break
		}
	}
	for {
		m := h.min.Load()
		if (m != 0 && ^m <= us) || h.min.CompareAndSwap(m, ^us) {
			break
		}
	}
}

// Count returns the number of recorded values.
func (h *Histogram) Count() uint64 { return h.total.Load() }

// Max returns the largest recorded value.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max.Load()) * time.Microsecond }

// Min returns the smallest recorded value (0 when empty).
func (h *Histogram) Min() time.Duration {
	m := h.min.Load()
	if m == 0 {
		return 0
	}
	return time.Duration(^m) * time.Microsecond
}

// Mean returns the average recorded value.
func (h *Histogram) Mean() time.Duration {
	n := h.total.Load()
	if n == 0 {
		return 0
	}
	return time.Duration(h.sum.Load()/n) * time.Microsecond
}

// Quantile returns the value at quantile q (0..1): the highest value of the bucket holding the
// ceil(q·n)-th smallest value, never above the recorded maximum, so it errs on the slow side by at
// most one bucket width.
func (h *Histogram) Quantile(q float64) time.Duration {
	n := h.total.Load()
	if n == 0 {
		return 0
	}
	rank := uint64(q*float64(n) + 0.9999999)
	if rank < 1 {
		rank = 1
	}
	if rank > n {
		rank = n
	}
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			_, hi := h.bounds(i)
			if m := h.max.Load(); hi > m {
				hi = m
			}
			return time.Duration(hi) * time.Microsecond
		}
	}
	return h.Max()
}

// Merge adds every value of o (same precision) to h.
func (h *Histogram) Merge(o *Histogram) {
	for i := range o.counts {
		if c := o.counts[i].Load(); c > 0 {
			h.counts[i].Add(c)
		}
	}
	h.total.Add(o.total.Load())
	h.sum.Add(o.sum.Load())
	if m := o.max.Load(); m > h.max.Load() {
		h.max.Store(m)
	}
	if om := o.min.Load(); om != 0 {
		if m := h.min.Load(); m == 0 || ^om < ^m {
			h.min.Store(om)
		}
	}
}
