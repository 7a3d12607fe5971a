package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// redisMaxCount is the largest stock or limit the scripts count exactly: Lua 5.1 numbers are
// doubles.
const redisMaxCount = 1 << 53

// redisActivityKeyNames lists every key an activity owns, meta first (delete.lua relies on it).
var redisActivityKeyNames = [...]string{"meta", "stock", "users", "orders", "acked", "dead", "released", "results", "line", "line_state"}

// Define creates or redefines an activity (see Store.Define). The window check uses the Redis
// server's clock. A new salt is drawn here and used only when the activity is created without one.
func (s *Store) Define(ctx context.Context, a admission.Activity, force bool) (admission.Activity, error) {
	a, err := a.Validate()
	if err != nil {
		return admission.Activity{}, fmt.Errorf("define: %w", err)
	}
	if a.Stock > redisMaxCount || a.Limit > redisMaxCount {
		return admission.Activity{}, fmt.Errorf("define %s: %w", a.ID, admission.BadInput("stock and limit must not exceed 2^53 (Lua numbers are doubles)"))
	}
	if a.Buckets > 1 {
		return s.defineBuckets(ctx, a, force)
	}
	reply, err := s.define.Run(ctx, s.client,
		[]string{s.key(a.ID, "meta"), s.key(a.ID, "stock")},
		a.Stock, a.Limit, a.Start.UnixMilli(), a.End.UnixMilli(), a.PayWithin.Milliseconds(), a.Salt,
		admission.NewSalt(), redisFlag(force), s.channel, a.ID,
	).StringSlice()
	if err != nil {
		return admission.Activity{}, fmt.Errorf("define %s: %w", a.ID, redisScriptErr(err))
	}
	stored, err := redisParseActivity(a.ID, reply)
	if err != nil {
		return admission.Activity{}, fmt.Errorf("define %s: %w", a.ID, err)
	}
	// The id set lives in another slot, so it cannot join the script; adding after the definition
	// means a failure leaves an unlisted activity that the caller's retry (a no-op) lists.
	if err := s.client.SAdd(ctx, s.activitiesKey(), a.ID).Err(); err != nil {
		return admission.Activity{}, fmt.Errorf("define %s: list activity: %w", a.ID, err)
	}
	return stored, nil
}

// Activity returns the definition and live counters of one activity, read in one transaction.
func (s *Store) Activity(ctx context.Context, id string) (admission.Snapshot, error) {
	if !admission.ValidActivityID(id) {
		return admission.Snapshot{}, fmt.Errorf("activity: %w", admission.BadInput("activity id %q", id))
	}
	var (
		meta  *redis.MapStringStringCmd
		stock *redis.StringCmd
		dead  *redis.IntCmd
	)
	_, err := s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		meta = p.HGetAll(ctx, s.key(id, "meta"))
		stock = p.Get(ctx, s.key(id, "stock"))
		dead = p.XLen(ctx, s.key(id, "dead"))
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return admission.Snapshot{}, fmt.Errorf("activity %s: %w", id, err)
	}
	m := meta.Val()
	if len(m) == 0 {
		return admission.Snapshot{}, fmt.Errorf("activity %s: %w", id, admission.ErrUnknownActivity)
	}
	if m["layout"] != "2" {
		return admission.Snapshot{}, fmt.Errorf("activity %s: %w", id, s.oldLayout(id))
	}
	if m["buckets"] != "" {
		return s.bucketSnapshot(ctx, id, m)
	}
	a, err := redisParseActivity(id, []string{m["stock_total"], m["limit"], m["start_ms"], m["end_ms"], m["pay_ms"], m["salt"]})
	if err != nil {
		return admission.Snapshot{}, fmt.Errorf("activity %s: %w", id, err)
	}
	left, err := stock.Int64()
	if err != nil {
		return admission.Snapshot{}, fmt.Errorf("activity %s: stock: %w", id, err)
	}
	snap := admission.Snapshot{
		Activity:  a,
		Remaining: left,
		Sold:      a.Stock - left,
		Dead:      dead.Val(),
	}
	// A stream entry carries all of one call's wins and :users keeps users who hold nothing: both
	// are counted in :meta (admit.lua, release.lua), read in the same transaction.
	if snap.Queued, err = redisMetaCount(m["wins"]); err != nil {
		return admission.Snapshot{}, fmt.Errorf("activity %s: wins: %w", id, err)
	}
	if snap.Buyers, err = redisMetaCount(m["buyers"]); err != nil {
		return admission.Snapshot{}, fmt.Errorf("activity %s: buyers: %w", id, err)
	}
	return snap, nil
}

// Activities lists the defined activity ids, sorted.
func (s *Store) Activities(ctx context.Context) ([]string, error) {
	ids, err := s.client.SMembers(ctx, s.activitiesKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("list activities: %w", err)
	}
	slices.Sort(ids)
	return ids, nil
}

// Delete removes an activity and every key it owns (see Store.Delete).
func (s *Store) Delete(ctx context.Context, id string, force bool) error {
	if !admission.ValidActivityID(id) {
		return fmt.Errorf("delete: %w", admission.BadInput("activity id %q", id))
	}
	// Read now, not from the cache: another node may have deleted and defined it again.
	s.bucketCache.Delete(id)
	n, err := s.bucketCount(ctx, id)
	if err != nil {
		return fmt.Errorf("delete %s: %w", id, err)
	}
	if n > 1 {
		return s.deleteBuckets(ctx, id, n, force)
	}
	keys := make([]string, len(redisActivityKeyNames))
	for i, name := range redisActivityKeyNames {
		keys[i] = s.key(id, name)
	}
	err = redisScriptErr(s.del.Run(ctx, s.client, keys, redisFlag(force)).Err())
	if err != nil && !errors.Is(err, admission.ErrUnknownActivity) {
		return fmt.Errorf("delete %s: %w", id, err)
	}
	s.bucketCache.Delete(id)
	// Also for an unknown activity: that heals an id listed by a define whose keys are gone.
	if serr := s.client.SRem(ctx, s.activitiesKey(), id).Err(); serr != nil {
		return fmt.Errorf("delete %s: unlist activity: %w", id, serr)
	}
	if err != nil {
		return fmt.Errorf("delete %s: %w", id, err)
	}
	return nil
}

// Remaining returns the stock left.
func (s *Store) Remaining(ctx context.Context, activity string) (int64, error) {
	if !admission.ValidActivityID(activity) {
		return 0, fmt.Errorf("remaining: %w", admission.BadInput("activity id %q", activity))
	}
	return bucketRetry(ctx, s, activity, func(n int) (int64, error) {
		if n > 1 {
			return s.bucketRemaining(ctx, activity, n)
		}
		return s.remainingOn(ctx, activity)
	})
}

func (s *Store) remainingOn(ctx context.Context, activity string) (int64, error) {
	n, err := s.hot.Get(ctx, s.key(activity, "stock")).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("remaining %s: %w", activity, admission.ErrUnknownActivity)
	}
	if err != nil {
		return 0, fmt.Errorf("remaining %s: %w", activity, err)
	}
	return n, nil
}

// HeldRequests lists the request ids of the wins not released (heldRequestsOn). The definition is
// read first, so that an activity without wins is told from an unknown one, and read again after
// the scan: a scan of keys that no longer exist finds nothing rather than failing, so a bucket
// count cached (or checked) before another node deleted the activity and defined it with another
// count must not yield an empty list (bucketRetry reads the count again).
func (s *Store) HeldRequests(ctx context.Context, activity string) ([]string, error) {
	if !admission.ValidActivityID(activity) {
		return nil, fmt.Errorf("held requests: %w", admission.BadInput("activity id %q", activity))
	}
	ids, err := bucketRetry(ctx, s, activity, func(n int) ([]string, error) {
		if n > 1 {
			ids, err := s.bucketHeldRequests(ctx, activity, n)
			if err != nil {
				return nil, err
			}
			return ids, s.checkShape(ctx, activity, n)
		}
		if err := s.checkShape(ctx, activity, 1); err != nil {
			return nil, err
		}
		ids, err := s.heldRequestsOn(ctx, activity)
		if err != nil {
			return nil, err
		}
		return ids, s.checkShape(ctx, activity, 1)
	})
	if err != nil {
		return nil, fmt.Errorf("held requests %s: %w", activity, err)
	}
	return ids, nil
}

// checkShape reads activity's definition and fails with ErrUnknownActivity unless it is defined
// with n buckets (1: not split), or with the error of an earlier build's activity.
func (s *Store) checkShape(ctx context.Context, activity string, n int) error {
	vals, err := s.client.HMGet(ctx, s.key(activity, "meta"), metaShapeFields...).Result()
	if err != nil {
		return err
	}
	defined, m, err := s.metaShape(activity, vals)
	switch {
	case err != nil:
		return err
	case !defined || m != n:
		return admission.ErrUnknownActivity
	}
	return nil
}

// redisMetaCount reads a counter field of :meta; absent ("") is 0.
func redisMetaCount(v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	return strconv.ParseInt(v, 10, 64)
}

// redisParseActivity reads {stock_total, limit, start_ms, end_ms, pay_ms, salt}.
func redisParseActivity(id string, f []string) (admission.Activity, error) {
	if len(f) != 6 {
		return admission.Activity{}, fmt.Errorf("malformed definition: %d fields", len(f))
	}
	var n [5]int64
	for i := range n {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return admission.Activity{}, fmt.Errorf("malformed definition: %w", err)
		}
		n[i] = v
	}
	return admission.Activity{
		ID:        id,
		Stock:     n[0],
		Limit:     n[1],
		Start:     time.UnixMilli(n[2]),
		End:       time.UnixMilli(n[3]),
		PayWithin: time.Duration(n[4]) * time.Millisecond,
		Salt:      f[5],
	}, nil
}

func redisFlag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
