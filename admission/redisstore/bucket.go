package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// Stock buckets (docs/admission.md, "Stock buckets"): an activity defined with Buckets n > 1 is a
// parent, whose keys under its own hash tag hold the definition and the transfer intents, and n
// complete activity key sets, the buckets, under the hash tags {A#i/n}, which Cluster spreads over
// its slots. admit.lua, release.lua and set_result.lua run on a bucket unchanged.

// BucketStats counts the stock transfers between buckets of every split activity this store has
// served since it was created (Store.BucketStats).
type BucketStats struct {
	Transfers int64 // transfers completed by this store (pulls, rebalancing, recoveries)
	Moved     int64 // items those transfers moved
	Recovered int64 // transfers found pending (a crashed or slow runner) and completed here
	DryPulls  int64 // admissions whose home bucket had too little stock, so stock was pulled in
	// Contended counts admissions refused with ErrContended: stock was left, other buyers won
	// every item their pulls brought in.
	Contended int64
	// FailedTransfers counts transfers (pulls, rebalancing, recoveries) that failed part-way;
	// their intent stays until a recovery completes them.
	FailedTransfers int64
}

// bucketCounters backs BucketStats.
type bucketCounters struct {
	transfers, moved, recovered, dryPulls, contended, failed atomic.Int64
}

// BucketStats returns the store's transfer counters (see BucketStats).
func (s *Store) BucketStats() BucketStats {
	c := &s.bucketCounters
	return BucketStats{
		Transfers: c.transfers.Load(),
		Moved:     c.moved.Load(),
		Recovered: c.recovered.Load(),
		DryPulls:  c.dryPulls.Load(),

		Contended:       c.contended.Load(),
		FailedTransfers: c.failed.Load(),
	}
}

// BucketLevels calls f with every split activity this store has read the buckets of (its
// rebalancer does every RebalanceInterval) and each bucket's unsold stock at that last reading.
// f must not keep stocks.
func (s *Store) BucketLevels(f func(activity string, stocks []int64)) {
	s.bucketLevels.Range(func(k, v any) bool {
		f(k.(string), v.([]int64))
		return true
	})
}

// bucketID names bucket i of n of activity: '#' and '/' are outside the activity id alphabet, so
// no user's activity id collides with it, and a different count gives different keys.
func bucketID(activity string, i, n int) string {
	return activity + "#" + strconv.Itoa(i) + "/" + strconv.Itoa(n)
}

// A bucket's reservation (and wins-queue entry) id is the stream id admit.lua hands out with
// ".<bucket>" appended: stream ids never contain '.', and the bucket tells Release and Ack where
// the entry lives.
func bucketEntryID(raw string, i int) string {
	return raw + "." + strconv.Itoa(i)
}

// splitBucketEntryID reverses bucketEntryID; ok is false for an id without a valid bucket.
func splitBucketEntryID(id string, n int) (raw string, i int, ok bool) {
	dot := strings.LastIndexByte(id, '.')
	if dot <= 0 {
		return "", 0, false
	}
	i, err := strconv.Atoi(id[dot+1:])
	if err != nil || i < 0 || i >= n {
		return "", 0, false
	}
	return id[:dot], i, true
}

// metaShapeFields are the fields of an activity's :meta that metaShape reads, in its order.
var metaShapeFields = []string{"buckets", "start_ms", "layout"}

// metaShape reads an activity's shape from its :meta fields metaShapeFields: whether it is
// defined, its bucket count (1: not split), and an error for an activity of an earlier build's
// key layout (ErrOldLayout) or a malformed count.
func (s *Store) metaShape(activity string, vals []any) (defined bool, n int, err error) {
	if len(vals) != 3 || vals[1] == nil { // not defined (yet)
		return false, 1, nil
	}
	if vals[2] != "2" {
		return true, 0, s.oldLayout(activity)
	}
	n = 1
	if v, ok := vals[0].(string); ok {
		if n, err = strconv.Atoi(v); err != nil || n < 2 || n > admission.MaxBuckets {
			return true, 0, fmt.Errorf("%s: malformed bucket count %q", activity, v)
		}
	}
	return true, n, nil
}

// bucketCount returns how many buckets activity is split into (1: not split), from the store's
// cache or, the first time, from the parent's definition. An activity not defined yet is not
// cached, so that its definition is seen once it exists. The count is fixed while an activity
// exists (bucket_define.lua); a deletion and a redefinition with another count changes every
// bucket key (bucketID), so a stale count meets an unknown bucket and is looked up again
// (bucketRetry). It is also where the store first meets an activity of an earlier build's key
// layout (ErrOldLayout): such an activity is never cached, so every call on it is refused.
func (s *Store) bucketCount(ctx context.Context, activity string) (int, error) {
	if v, ok := s.bucketCache.Load(activity); ok {
		return v.(int), nil
	}
	vals, err := s.client.HMGet(ctx, s.key(activity, "meta"), metaShapeFields...).Result()
	if err != nil {
		return 0, fmt.Errorf("%s: read bucket count: %w", activity, err)
	}
	defined, n, err := s.metaShape(activity, vals)
	if !defined || err != nil {
		return n, err
	}
	s.bucketCache.Store(activity, n)
	if n > 1 {
		s.startRebalancer()
	}
	return n, nil
}

// bucketRetry runs f with activity's bucket count. When f finds the activity unknown, the count
// may be stale (the activity was deleted and defined again with another count by another node):
// it is looked up again, and f runs again if it changed.
func bucketRetry[T any](ctx context.Context, s *Store, activity string, f func(n int) (T, error)) (T, error) {
	n, err := s.bucketCount(ctx, activity)
	if err != nil {
		var zero T
		return zero, err
	}
	v, err := f(n)
	if errors.Is(err, ErrOldLayout) {
		// A script met an earlier build's activity under a cached count (it was deleted and
		// defined again by an earlier build): every call on it goes to bucketCount's check again.
		s.bucketCache.Delete(activity)
	}
	if !errors.Is(err, admission.ErrUnknownActivity) {
		return v, err
	}
	s.bucketCache.Delete(activity)
	m, cerr := s.bucketCount(ctx, activity)
	if cerr != nil || m == n {
		return v, err
	}
	return f(m)
}

// oldLayout is the error for activity (or one of its buckets) of an earlier build's key layout.
func (s *Store) oldLayout(activity string) error {
	return &OldLayoutError{Prefix: s.prefix, Activity: parentActivity(activity)}
}

// parentActivity returns the activity of on, an activity or one of its buckets (bucketID: '#' is
// outside the activity id alphabet).
func parentActivity(on string) string {
	if i := strings.IndexByte(on, '#'); i >= 0 {
		return on[:i]
	}
	return on
}
