package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// intentsKey names a split activity's transfer intents, on the parent's slot.
func (s *Store) intentsKey(activity string) string { return s.key(activity, "intents") }

// transferLogKey names a bucket's log of the transfers that took from or gave to it.
func (s *Store) transferLogKey(bucket string) string { return s.key(bucket, "transfers") }

// defineBuckets is Define for a.Buckets > 1 (a is validated): the parent first, then every
// bucket, then the stock a raise or a cut moves. Every step can run again, so a retry of a
// Define that failed half-way completes it.
func (s *Store) defineBuckets(ctx context.Context, a admission.Activity, force bool) (admission.Activity, error) {
	n := a.Buckets
	reply, err := scriptBucketDefine.Run(ctx, s.client,
		[]string{s.key(a.ID, "meta"), s.intentsKey(a.ID)},
		a.Stock, a.Limit, a.Start.UnixMilli(), a.End.UnixMilli(), a.PayWithin.Milliseconds(), a.Salt,
		admission.NewSalt(), redisFlag(force), n, "raise-"+admission.NewSalt()[:12], admission.NewSalt()[:16],
	).StringSlice()
	if err != nil {
		return admission.Activity{}, fmt.Errorf("define %s: %w", a.ID, redisScriptErr(err))
	}
	if len(reply) != 8 {
		return admission.Activity{}, fmt.Errorf("define %s: malformed reply %q", a.ID, reply)
	}
	stored, err := redisParseActivity(a.ID, reply[1:7])
	if err != nil {
		return admission.Activity{}, fmt.Errorf("define %s: %w", a.ID, err)
	}
	stored.Buckets = n
	// The parent's gen, which every bucket gets (a bucket created by an earlier attempt has it).
	gen := reply[7]
	s.bucketCache.Store(a.ID, n)
	s.startRebalancer()
	// Every bucket: created with its share of the stock, or its definition updated.
	for i := range n {
		share := stored.Stock / int64(n)
		if int64(i) < stored.Stock%int64(n) {
			share++
		}
		b := bucketID(a.ID, i, n)
		err := scriptBucketSetup.Run(ctx, s.client, []string{s.key(b, "meta"), s.key(b, "stock")},
			share, stored.Limit, stored.Start.UnixMilli(), stored.End.UnixMilli(), stored.PayWithin.Milliseconds(),
			stored.Salt, gen).Err()
		if err != nil {
			return admission.Activity{}, fmt.Errorf("define %s: bucket %d: %w", a.ID, i, redisScriptErr(err))
		}
	}
	// A raise is recorded as intents: complete them (and any left by an earlier attempt).
	if _, err := s.recoverTransfers(ctx, a.ID, n, 0); err != nil {
		return admission.Activity{}, fmt.Errorf("define %s: %w", a.ID, err)
	}
	if reply[0] == "shrink" {
		if err := s.shrinkBuckets(ctx, a.ID, n, stored.Stock-a.Stock); err != nil {
			return admission.Activity{}, fmt.Errorf("define %s: %w", a.ID, err)
		}
		stored.Stock = a.Stock
	}
	if err := s.client.SAdd(ctx, s.activitiesKey(), a.ID).Err(); err != nil {
		return admission.Activity{}, fmt.Errorf("define %s: list activity: %w", a.ID, err)
	}
	return stored, nil
}

// shrinkBuckets lowers a split activity's total by cut items, taken from the buckets' unsold
// stock, richest first. Stock sold meanwhile can leave too little: ErrStockBelowSold, with the
// total lowered by what was taken.
func (s *Store) shrinkBuckets(ctx context.Context, activity string, n int, cut int64) error {
	st, err := s.bucketStocks(ctx, activity, n)
	if err != nil {
		return err
	}
	var left int64
	for _, b := range st.buckets {
		left += b.stock
	}
	if left < cut {
		return admission.ErrStockBelowSold
	}
	for cut > 0 {
		i := st.richest(-1)
		if i < 0 || st.buckets[i].stock == 0 {
			return admission.ErrStockBelowSold
		}
		q, err := s.transfer(ctx, activity, n, i, -1, min(cut, st.buckets[i].stock))
		if err != nil {
			return err
		}
		cut -= q
		st.buckets[i].stock = 0 // taken all it had, or all that was needed
	}
	return nil
}

// bucketState is one bucket's counters.
type bucketState struct {
	total, stock, buyers, queued, dead int64
}

// bucketStates is every bucket's counters of one split activity, with the parent's total.
type bucketStates struct {
	total   int64
	buckets []bucketState
}

// richest returns the bucket with the most unsold stock other than skip (-1 when none has any).
func (b *bucketStates) richest(skip int) int {
	best := -1
	for i, x := range b.buckets {
		if i != skip && x.stock > 0 && (best < 0 || x.stock > b.buckets[best].stock) {
			best = i
		}
	}
	return best
}

// sold is the items held by buyers over all buckets.
func (b *bucketStates) sold() int64 {
	var n int64
	for _, x := range b.buckets {
		n += x.total - x.stock
	}
	return n
}

// bucketStocks reads the parent's total and each bucket's total and stock in one pipeline (a
// Cluster client sends it to every node at once). Each bucket is read by one script
// (bucket_read.lua), so a bucket's total and stock are consistent with each other: the sold
// count, total less stock, never shows a transfer step half seen. The buckets are not read at
// one instant, so items in the middle of a transfer may be in none of them (or, when the
// transfer ends between the reads, in two): their stocks are a snapshot of a moving sale, but
// the sold counts and the parent's total, which transfers do not change together, are exact.
func (s *Store) bucketStocks(ctx context.Context, activity string, n int) (*bucketStates, error) {
	return s.readBuckets(ctx, activity, n, false)
}

func (s *Store) readBuckets(ctx context.Context, activity string, n int, counts bool) (*bucketStates, error) {
	keys := make([][]string, n)
	for i := range keys {
		b := bucketID(activity, i, n)
		keys[i] = []string{s.key(b, "meta"), s.key(b, "stock")}
		if counts {
			keys[i] = append(keys[i], s.key(b, "dead"))
		}
	}
	cmds := make([]*redis.Cmd, n)
	var total *redis.StringCmd
	read := func(byHash bool) error {
		_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			total = p.HGet(ctx, s.key(activity, "meta"), "total")
			for i := range cmds {
				if byHash {
					cmds[i] = scriptBucketRead.EvalSha(ctx, p, keys[i])
				} else {
					cmds[i] = scriptBucketRead.Eval(ctx, p, keys[i])
				}
			}
			return nil
		})
		return err
	}
	err := read(true)
	if err != nil && slices.ContainsFunc(cmds, func(c *redis.Cmd) bool { return redis.HasErrorPrefix(c.Err(), "NOSCRIPT") }) {
		// A server that has not seen the script yet (a restart, a failover, a new node): the
		// whole source once, which also caches it there.
		err = read(false)
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read buckets of %s: %w", activity, err)
	}
	st := &bucketStates{buckets: make([]bucketState, n)}
	if st.total, err = total.Int64(); err != nil {
		if errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("%s: %w", activity, admission.ErrUnknownActivity)
		}
		return nil, fmt.Errorf("%s: total: %w", activity, err)
	}
	for i, c := range cmds {
		v, err := c.Slice()
		if err == nil && len(v) != 5 {
			err = fmt.Errorf("bucket_read.lua answered %d values, not 5", len(v))
		}
		if err != nil {
			return nil, fmt.Errorf("%s: bucket %d: %w", activity, i, redisScriptErr(err))
		}
		total, tok := v[0].(string)
		stock, sok := v[1].(string)
		if !tok || !sok {
			// A bucket not set up yet (a define cut short): retrying the define creates it.
			return nil, fmt.Errorf("%s: bucket %d: %w", activity, i, admission.ErrUnknownActivity)
		}
		b := &st.buckets[i]
		var terr, serr error
		b.total, terr = strconv.ParseInt(total, 10, 64)
		b.stock, serr = strconv.ParseInt(stock, 10, 64)
		if err := errors.Join(terr, serr); err != nil {
			return nil, fmt.Errorf("%s: bucket %d: %w", activity, i, err)
		}
		b.buyers, _ = v[2].(int64)
		b.queued, _ = v[3].(int64)
		b.dead, _ = v[4].(int64)
	}
	levels := make([]int64, n)
	for i, b := range st.buckets {
		levels[i] = b.stock
	}
	s.bucketLevels.Store(activity, levels)
	return st, nil
}

// bucketSnapshot is Activity for a split activity whose parent definition m was read: the
// buckets' counters added up. Remaining is the total less what buyers hold, so that stock in the
// middle of a transfer counts as unsold.
func (s *Store) bucketSnapshot(ctx context.Context, id string, m map[string]string) (admission.Snapshot, error) {
	a, err := redisParseActivity(id, []string{m["total"], m["user_limit"], m["start_ms"], m["end_ms"], m["pay_ms"], m["salt"]})
	if err != nil {
		return admission.Snapshot{}, fmt.Errorf("activity %s: %w", id, err)
	}
	n, err := strconv.Atoi(m["buckets"])
	if err != nil {
		return admission.Snapshot{}, fmt.Errorf("activity %s: buckets: %w", id, err)
	}
	a.Buckets = n
	st, err := s.readBuckets(ctx, id, n, true)
	if err != nil {
		return admission.Snapshot{}, fmt.Errorf("activity %s: %w", id, err)
	}
	snap := admission.Snapshot{Activity: a, Sold: st.sold()}
	snap.Remaining = st.total - snap.Sold
	for _, b := range st.buckets {
		snap.Buyers += b.buyers
		snap.Queued += b.queued
		snap.Dead += b.dead
	}
	return snap, nil
}

// bucketRemaining is Remaining for a split activity (see bucketSnapshot).
func (s *Store) bucketRemaining(ctx context.Context, activity string, n int) (int64, error) {
	st, err := s.bucketStocks(ctx, activity, n)
	if err != nil {
		return 0, fmt.Errorf("remaining: %w", err)
	}
	return st.total - st.sold(), nil
}

// bucketHeldRequests is HeldRequests for a split activity: a user's wins, their field and the
// :released of their reservations are all in the home bucket, so each bucket answers for its own.
func (s *Store) bucketHeldRequests(ctx context.Context, activity string, n int) ([]string, error) {
	var ids []string
	for i := range n {
		b, err := s.heldRequestsOn(ctx, bucketID(activity, i, n))
		if err != nil {
			return nil, fmt.Errorf("bucket %d: %w", i, err)
		}
		ids = append(ids, b...)
	}
	return ids, nil
}

// deleteBuckets is Delete for a split activity: the parent's check, every bucket, then the
// parent, so that an interrupted delete leaves a parent for its retry.
func (s *Store) deleteBuckets(ctx context.Context, id string, n int, force bool) error {
	parent := []string{s.key(id, "meta"), s.intentsKey(id)}
	if err := scriptBucketDelete.Run(ctx, s.client, parent, redisFlag(force), "check").Err(); err != nil {
		return fmt.Errorf("delete %s: %w", id, redisScriptErr(err))
	}
	for i := range n {
		b := bucketID(id, i, n)
		keys := make([]string, 0, len(redisActivityKeyNames)+1)
		for _, name := range redisActivityKeyNames {
			keys = append(keys, s.key(b, name))
		}
		keys = append(keys, s.transferLogKey(b))
		if err := s.client.Del(ctx, keys...).Err(); err != nil {
			return fmt.Errorf("delete %s: bucket %d: %w", id, i, err)
		}
	}
	// The waiting room's line lives in the parent's slot, beside its meta.
	if err := s.client.Del(ctx, s.key(id, "line"), s.key(id, "line_state")).Err(); err != nil {
		return fmt.Errorf("delete %s: line: %w", id, err)
	}
	err := scriptBucketDelete.Run(ctx, s.client, parent, "1", "delete").Err()
	if err != nil && !errors.Is(redisScriptErr(err), admission.ErrUnknownActivity) {
		return fmt.Errorf("delete %s: %w", id, redisScriptErr(err))
	}
	s.bucketCache.Delete(id)
	s.bucketLevels.Delete(id)
	if err := s.client.SRem(ctx, s.activitiesKey(), id).Err(); err != nil {
		return fmt.Errorf("delete %s: unlist activity: %w", id, err)
	}
	return nil
}
