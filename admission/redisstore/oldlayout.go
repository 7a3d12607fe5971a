package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrOldLayout is the error (inside an *OldLayoutError) of a call on an activity that an earlier
// build created in its own key layout: its :meta has no layout 2 (docs/admission.md, "Redis
// keys"). This build serves only the layout of lua/admit.lua, so it refuses such an activity
// rather than misread it: New refuses a Redis that lists one, a store meets one at its first call
// on the activity (bucketCount), and every script that reads or writes an activity's keys refuses
// it before it writes anything (LAYOUT).
var ErrOldLayout = errors.New("key layout of an earlier build")

// OldLayoutError names the activity of an earlier build's key layout and what to do about it. It
// wraps ErrOldLayout.
type OldLayoutError struct {
	Prefix   string // the store's key prefix (Options.KeyPrefix)
	Activity string // the activity (the parent of a split one)
}

func (e *OldLayoutError) Error() string {
	return fmt.Sprintf("activity %[2]s in Redis (prefix %[1]s) uses the key layout of an earlier build, which this build no "+
		"longer serves: finish or delete that sale with the earlier build (or delete its keys, %[1]s:{%[2]s}:* and, "+
		"if it is split into buckets, %[1]s:{%[2]s#*}:*, and remove %[2]s from the set %[1]s:activities) before starting this one",
		e.Prefix, e.Activity)
}

func (e *OldLayoutError) Unwrap() error { return ErrOldLayout }

// layoutRefusal starts the error word the scripts answer for an activity without layout 2; the
// key of its :meta follows.
const layoutRefusal = "LAYOUT no layout 2 in "

// oldLayoutErr turns a script's refusal "LAYOUT no layout 2 in <prefix>:{<activity>}:meta" into
// an *OldLayoutError naming the activity.
func oldLayoutErr(msg string) error {
	key, ok := strings.CutPrefix(msg, layoutRefusal)
	i, j := strings.Index(key, ":{"), strings.LastIndex(key, "}:")
	if !ok || i < 0 || j < i+2 {
		return fmt.Errorf("%w: %s", ErrOldLayout, msg)
	}
	return &OldLayoutError{Prefix: key[:i], Activity: parentActivity(key[i+2 : j])}
}

// checkTimeout bounds New's look at the activities already in Redis.
const checkTimeout = 5 * time.Second

// checkLayouts returns an *OldLayoutError for each activity listed in P:activities whose :meta,
// or the :meta of one of its buckets, has no layout 2 (joined, sorted by activity); an activity
// listed but not defined (a define or a delete cut short) is left alone. The list is small: the
// sales defined and not deleted.
func (s *Store) checkLayouts(ctx context.Context) error {
	ids, err := s.client.SMembers(ctx, s.activitiesKey()).Result()
	if err != nil {
		return err
	}
	slices.Sort(ids)
	metas := make([]*redis.SliceCmd, len(ids))
	if _, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			metas[i] = p.HMGet(ctx, s.key(id, "meta"), metaShapeFields...)
		}
		return nil
	}); err != nil {
		return err
	}
	old := map[string]bool{}
	var buckets []string // the buckets of the split activities of layout 2, to look at too
	for i, id := range ids {
		_, n, err := s.metaShape(id, metas[i].Val())
		switch {
		case errors.Is(err, ErrOldLayout):
			old[id] = true
		case err == nil && n > 1: // a malformed count is left to bucketCount, which refuses it
			buckets = append(buckets, s.keySets(id, n)...)
		}
	}
	bmetas := make([]*redis.SliceCmd, len(buckets))
	if _, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, b := range buckets {
			bmetas[i] = p.HMGet(ctx, s.key(b, "meta"), "start_ms", "layout")
		}
		return nil
	}); err != nil {
		return err
	}
	for i, b := range buckets {
		if v := bmetas[i].Val(); len(v) == 2 && v[0] != nil && v[1] != "2" {
			old[parentActivity(b)] = true
		}
	}
	var errs []error
	for _, id := range ids {
		if old[id] {
			errs = append(errs, s.oldLayout(id))
		}
	}
	return errors.Join(errs...)
}
