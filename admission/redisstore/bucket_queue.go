package redisstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// The wins queue of a split activity is one stream per bucket: admit.lua appends a win to its
// bucket's stream in the same atomic step as the decision, and a script touches one slot, so the
// stream must live with the bucket. The Queue methods on the parent id read all of them; an entry
// id names its bucket (bucketEntryID).

// bucketReadPoll is how often a blocking ReadGroup of a split activity looks at its buckets
// again: one blocking read can wait on one stream only, since the streams are on other slots.
const bucketReadPoll = 20 * time.Millisecond

// keySets returns the ids of activity's key sets: itself, or its n buckets.
func (s *Store) keySets(activity string, n int) []string {
	if n < 2 {
		return []string{activity}
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = bucketID(activity, i, n)
	}
	return ids
}

// renameWins gives bucket i's entries the parent's activity and their bucketed ids.
func renameWins(wins []admission.Win, activity string, i int) []admission.Win {
	for k := range wins {
		w := &wins[k]
		w.ID = bucketEntryID(w.ID, i)
		w.ReservationID = w.ID
		w.Activity = activity
	}
	return wins
}

// readGroupBuckets is ReadGroup for a split activity: one sweep over the buckets, each read
// without blocking for what is still wanted; when nothing came and block allows, again every
// bucketReadPoll.
func (s *Store) readGroupBuckets(ctx context.Context, activity string, n int, group, consumer string, count int, block time.Duration, pending bool) ([]admission.Win, error) {
	deadline := time.Now().Add(block)
	for {
		var wins []admission.Win
		start := int(s.bucketReadStart.Add(1))
		for k := 0; k < n && len(wins) < count; k++ {
			i := (start + k) % n
			got, err := s.readGroupOn(ctx, activity, bucketID(activity, i, n), group, consumer, count-len(wins), 0, pending)
			if err != nil {
				return nil, err
			}
			wins = append(wins, renameWins(got, activity, i)...)
		}
		wait := time.Until(deadline)
		if len(wins) > 0 || pending || wait <= 0 {
			return wins, nil
		}
		if !sleepCtx(ctx, min(wait, bucketReadPoll)) {
			return nil, fmt.Errorf("read group %s %s: %w", activity, group, ctx.Err())
		}
	}
}

// ackBuckets is Ack for a split activity: each id to its bucket. An id of no bucket names no
// entry of the activity: acknowledging it does nothing, as for an unknown entry.
func (s *Store) ackBuckets(ctx context.Context, activity string, n int, group string, ids []string) error {
	byBucket := map[int][]string{}
	for _, id := range ids {
		if raw, i, ok := splitBucketEntryID(id, n); ok {
			byBucket[i] = append(byBucket[i], raw)
		}
	}
	for i, raws := range byBucket {
		if err := s.ackOn(ctx, activity, bucketID(activity, i, n), group, raws); err != nil {
			return err
		}
	}
	return nil
}

// claimBuckets is Claim for a split activity: up to count entries over all buckets.
func (s *Store) claimBuckets(ctx context.Context, activity string, n int, group, consumer string, minIdle time.Duration, count int) ([]admission.Win, error) {
	var wins []admission.Win
	start := int(s.bucketReadStart.Add(1))
	for k := 0; k < n && len(wins) < count; k++ {
		i := (start + k) % n
		got, err := s.claimOn(ctx, activity, bucketID(activity, i, n), group, consumer, minIdle, count-len(wins))
		if err != nil {
			return nil, err
		}
		wins = append(wins, renameWins(got, activity, i)...)
	}
	return wins, nil
}

// deadLettersBuckets is DeadLetters for a split activity: the oldest count entries over all
// buckets, by admission time.
func (s *Store) deadLettersBuckets(ctx context.Context, activity string, n, count int) ([]admission.Win, error) {
	var wins []admission.Win
	for i := range n {
		got, err := s.deadLettersOn(ctx, activity, bucketID(activity, i, n), count)
		if err != nil {
			return nil, err
		}
		wins = append(wins, renameWins(got, activity, i)...)
	}
	slices.SortStableFunc(wins, func(a, b admission.Win) int {
		return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.ID, b.ID))
	})
	return wins[:min(count, len(wins))], nil
}
