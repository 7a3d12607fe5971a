package admission

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Bounds on consumer group and consumer names and on dead-letter reasons, which are stored.
const (
	maxQueueName   = 256
	maxQueueReason = 1024
)

// EnsureGroup creates the consumer group at the start of the activity's stream, unless it exists.
func (s *RedisStore) EnsureGroup(ctx context.Context, activity, group string) error {
	if err := redisCheckQueue(activity, group, "-"); err != nil {
		return fmt.Errorf("ensure group: %w", err)
	}
	_, err := bucketRetry(ctx, s, activity, func(n int) (struct{}, error) {
		for _, on := range s.keySets(activity, n) {
			if err := s.ensureGroupOn(ctx, activity, on, group); err != nil {
				return struct{}{}, err
			}
		}
		return struct{}{}, nil
	})
	return err
}

func (s *RedisStore) ensureGroupOn(ctx context.Context, activity, on, group string) error {
	err := s.ensureGroup.Run(ctx, s.client, []string{s.key(on, "meta"), s.key(on, "orders")}, group).Err()
	if err != nil {
		return fmt.Errorf("ensure group %s %s: %w", activity, group, redisScriptErr(err))
	}
	return nil
}

// ReadGroup delivers entries to consumer (see Queue.ReadGroup). New entries are read with a plain
// XREADGROUP, which may block; a consumer's pending entries are re-read by a script that also
// returns their delivery counts.
func (s *RedisStore) ReadGroup(ctx context.Context, activity, group, consumer string, count int, block time.Duration, pending bool) ([]Win, error) {
	if err := redisCheckQueue(activity, group, consumer); err != nil {
		return nil, fmt.Errorf("read group: %w", err)
	}
	if count <= 0 || block < 0 {
		return nil, fmt.Errorf("read group %s: %w", activity, badInput("count %d must be positive and block %s not negative", count, block))
	}
	return bucketRetry(ctx, s, activity, func(n int) ([]Win, error) {
		if n > 1 {
			return s.readGroupBuckets(ctx, activity, n, group, consumer, count, block, pending)
		}
		return s.readGroupOn(ctx, activity, activity, group, consumer, count, block, pending)
	})
}

// readGroupOn reads from the wins stream of on: activity or one of its buckets (whose entries
// the caller renames).
func (s *RedisStore) readGroupOn(ctx context.Context, activity, on, group, consumer string, count int, block time.Duration, pending bool) ([]Win, error) {
	if pending {
		reply, err := s.runDelivery(ctx, "read pending", activity, s.readPending, luaReadPending,
			[]string{s.key(on, "meta"), s.key(on, "orders")}, group, consumer, count)
		if err != nil {
			return nil, fmt.Errorf("read pending %s %s: %w", activity, group, redisScriptErr(err))
		}
		wins, err := redisParseEntries(activity, reply)
		if err != nil {
			return nil, fmt.Errorf("read pending %s %s: %w", activity, group, err)
		}
		return wins, nil
	}

	streams, err := s.readNew(ctx, on, group, consumer, count, block)
	if err != nil {
		return nil, fmt.Errorf("read group %s %s: %w", activity, group, s.noGroupErr(ctx, on, err))
	}
	var wins []Win
	for _, st := range streams {
		for _, m := range st.Messages {
			if m.Values == nil { // deleted from the stream while pending
				continue
			}
			w, err := redisParseWin(activity, m.ID, 1, func(f string) string { v, _ := m.Values[f].(string); return v })
			if err != nil {
				return nil, fmt.Errorf("read group %s %s: %w", activity, group, err)
			}
			wins = append(wins, w)
		}
	}
	return wins, nil
}

// readNew reads new entries, waiting up to block. go-redis cannot interrupt a blocking command
// when ctx is canceled, so a long wait is cut into slices with a context check between them.
// With ReplicasAck the read and its WAIT go together (readGroupAcked), in shorter slices when
// the client's read timeout asks for it, or polled when it leaves no room to block.
func (s *RedisStore) readNew(ctx context.Context, activity, group, consumer string, count int, block time.Duration) ([]redis.XStream, error) {
	if s.ack != nil {
		return s.readNewAcked(ctx, activity, group, consumer, count, block)
	}
	slice := readBlockSlice
	for {
		args := &redis.XReadGroupArgs{
			Group:    group,
			Consumer: consumer,
			Streams:  []string{s.key(activity, "orders"), ">"},
			Count:    int64(count),
			Block:    -1, // go-redis sends BLOCK for any value >= 0, and BLOCK 0 waits forever
		}
		wait := min(block, slice)
		if wait > 0 {
			args.Block = wait
		}
		streams, err := s.client.XReadGroup(ctx, args).Result()
		if errors.Is(err, redis.Nil) {
			err = nil
		}
		if err != nil || len(streams) > 0 {
			return streams, err
		}
		if block -= wait; block <= 0 {
			return nil, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// readNewAcked is readNew with ReplicasAck.
func (s *RedisStore) readNewAcked(ctx context.Context, activity, group, consumer string, count int, block time.Duration) ([]redis.XStream, error) {
	for {
		wait := min(block, s.ack.readBlock)
		streams, err := s.readGroupAcked(ctx, activity, s.key(activity, "orders"), group, consumer, count, wait)
		if err != nil || len(streams) > 0 {
			return streams, err
		}
		if s.ack.readBlock == 0 { // the read did not block: wait here
			wait = min(block, bucketReadPoll)
			if wait > 0 && !sleepCtx(ctx, wait) {
				return nil, ctx.Err()
			}
		}
		if block -= wait; block <= 0 {
			return nil, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// sleepCtx waits d or until ctx is done, reporting whether the full wait elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Ack acknowledges entries; acknowledging twice is harmless.
func (s *RedisStore) Ack(ctx context.Context, activity, group string, ids ...string) error {
	if err := redisCheckQueue(activity, group, "-"); err != nil {
		return fmt.Errorf("ack: %w", err)
	}
	if len(ids) == 0 {
		return nil
	}
	for _, id := range ids {
		if err := redisCheckName("entry id", id, MaxRequestIDLen); err != nil {
			return fmt.Errorf("ack %s: %w", activity, err)
		}
	}
	_, err := bucketRetry(ctx, s, activity, func(n int) (struct{}, error) {
		if n > 1 {
			return struct{}{}, s.ackBuckets(ctx, activity, n, group, ids)
		}
		return struct{}{}, s.ackOn(ctx, activity, activity, group, ids)
	})
	return err
}

func (s *RedisStore) ackOn(ctx context.Context, activity, on, group string, ids []string) error {
	if err := s.client.XAck(ctx, s.key(on, "orders"), group, ids...).Err(); err != nil {
		return fmt.Errorf("ack %s %s: %w", activity, group, err)
	}
	return nil
}

// Claim transfers to consumer the entries pending longer than minIdle, with their delivery counts
// (see Queue.Claim and lua/claim.lua).
func (s *RedisStore) Claim(ctx context.Context, activity, group, consumer string, minIdle time.Duration, count int) ([]Win, error) {
	if err := redisCheckQueue(activity, group, consumer); err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	if count <= 0 || minIdle < 0 {
		return nil, fmt.Errorf("claim %s: %w", activity, badInput("count %d must be positive and min idle %s not negative", count, minIdle))
	}
	return bucketRetry(ctx, s, activity, func(n int) ([]Win, error) {
		if n > 1 {
			return s.claimBuckets(ctx, activity, n, group, consumer, minIdle, count)
		}
		return s.claimOn(ctx, activity, activity, group, consumer, minIdle, count)
	})
}

func (s *RedisStore) claimOn(ctx context.Context, activity, on, group, consumer string, minIdle time.Duration, count int) ([]Win, error) {
	reply, err := s.runDelivery(ctx, "claim", activity, s.claim, luaClaim,
		[]string{s.key(on, "meta"), s.key(on, "orders")}, group, consumer, minIdle.Milliseconds(), count)
	if err != nil {
		return nil, fmt.Errorf("claim %s %s: %w", activity, group, redisScriptErr(err))
	}
	wins, err := redisParseEntries(activity, reply)
	if err != nil {
		return nil, fmt.Errorf("claim %s %s: %w", activity, group, err)
	}
	return wins, nil
}

// DeadLetter moves an entry to the dead-letter stream and acknowledges it in one script. The
// entry is copied from the wins stream, not from w, so only w.ID matters. An entry that is no
// longer pending in the group is left alone, which makes a repeated call harmless.
func (s *RedisStore) DeadLetter(ctx context.Context, activity, group string, w Win, reason string) error {
	if err := redisCheckQueue(activity, group, "-"); err != nil {
		return fmt.Errorf("dead letter: %w", err)
	}
	if err := redisCheckName("entry id", w.ID, MaxRequestIDLen); err != nil {
		return fmt.Errorf("dead letter %s: %w", activity, err)
	}
	if len(reason) > maxQueueReason {
		return fmt.Errorf("dead letter %s: %w", activity, badInput("reason is longer than %d bytes", maxQueueReason))
	}
	_, err := bucketRetry(ctx, s, activity, func(n int) (struct{}, error) {
		if n > 1 {
			raw, i, ok := splitBucketEntryID(w.ID, n)
			if !ok {
				return struct{}{}, nil // no entry of the activity: nothing pending to move
			}
			return struct{}{}, s.deadLetterOn(ctx, activity, bucketID(activity, i, n), group, raw, reason)
		}
		return struct{}{}, s.deadLetterOn(ctx, activity, activity, group, w.ID, reason)
	})
	return err
}

func (s *RedisStore) deadLetterOn(ctx context.Context, activity, on, group, id, reason string) error {
	keys := []string{s.key(on, "meta"), s.key(on, "orders"), s.key(on, "dead")}
	if err := s.deadLetter.Run(ctx, s.client, keys, group, id, reason).Err(); err != nil {
		return fmt.Errorf("dead letter %s %s: %w", activity, id, redisScriptErr(err))
	}
	return nil
}

// DeadLetters lists the dead-letter stream, oldest first. Each Win carries the id it had in the
// wins stream, its delivery count when it was moved, and the reason.
func (s *RedisStore) DeadLetters(ctx context.Context, activity string, count int) ([]Win, error) {
	if !ValidActivityID(activity) {
		return nil, fmt.Errorf("dead letters: %w", badInput("activity id %q", activity))
	}
	if count <= 0 {
		return nil, fmt.Errorf("dead letters %s: %w", activity, badInput("count %d must be positive", count))
	}
	return bucketRetry(ctx, s, activity, func(n int) ([]Win, error) {
		if n > 1 {
			return s.deadLettersBuckets(ctx, activity, n, count)
		}
		return s.deadLettersOn(ctx, activity, activity, count)
	})
}

func (s *RedisStore) deadLettersOn(ctx context.Context, activity, on string, count int) ([]Win, error) {
	msgs, err := s.client.XRangeN(ctx, s.key(on, "dead"), "-", "+", int64(count)).Result()
	if err != nil {
		return nil, fmt.Errorf("dead letters %s: %w", activity, err)
	}
	if len(msgs) == 0 {
		return nil, s.mustExist(ctx, "dead letters", on)
	}
	wins := make([]Win, 0, len(msgs))
	for _, m := range msgs {
		get := func(f string) string { v, _ := m.Values[f].(string); return v }
		n, _ := strconv.ParseInt(get("deliveries"), 10, 64)
		w, err := redisParseWin(activity, get("id"), n, get)
		if err != nil {
			return nil, fmt.Errorf("dead letters %s: %w", activity, err)
		}
		w.Reason = get("reason")
		wins = append(wins, w)
	}
	return wins, nil
}

// noGroupErr tells a missing group (ErrNotFound) from a missing activity: XREADGROUP answers
// NOGROUP for both.
func (s *RedisStore) noGroupErr(ctx context.Context, activity string, err error) error {
	var re redis.Error
	if !errors.As(err, &re) || !strings.HasPrefix(re.Error(), "NOGROUP") {
		return err
	}
	if n, xerr := s.client.Exists(ctx, s.key(activity, "meta")).Result(); xerr == nil && n == 0 {
		return ErrUnknownActivity
	}
	return redisScriptErr(err)
}

// mustExist returns ErrUnknownActivity (wrapped with op) when the activity has no definition.
func (s *RedisStore) mustExist(ctx context.Context, op, activity string) error {
	n, err := s.client.Exists(ctx, s.key(activity, "meta")).Result()
	switch {
	case err != nil:
		return fmt.Errorf("%s %s: %w", op, activity, err)
	case n == 0:
		return fmt.Errorf("%s %s: %w", op, activity, ErrUnknownActivity)
	}
	return nil
}

func redisCheckQueue(activity, group, consumer string) error {
	if !ValidActivityID(activity) {
		return badInput("activity id %q", activity)
	}
	if err := redisCheckName("group", group, maxQueueName); err != nil {
		return err
	}
	return redisCheckName("consumer", consumer, maxQueueName)
}

// redisParseEntries reads the scripts' {{id, deliveries, {field, value, ...}}, ...}.
func redisParseEntries(activity string, reply []any) ([]Win, error) {
	wins := make([]Win, 0, len(reply))
	for _, e := range reply {
		t, ok := e.([]any)
		if !ok || len(t) != 3 {
			return nil, fmt.Errorf("malformed entry %v", e)
		}
		id, ok1 := t[0].(string)
		n, ok2 := t[1].(int64)
		flat, ok3 := t[2].([]any)
		if !ok1 || !ok2 || !ok3 {
			return nil, fmt.Errorf("malformed entry %v", e)
		}
		w, err := redisParseWin(activity, id, n, func(f string) string {
			for i := 0; i+1 < len(flat); i += 2 {
				if k, _ := flat[i].(string); k == f {
					v, _ := flat[i+1].(string)
					return v
				}
			}
			return ""
		})
		if err != nil {
			return nil, err
		}
		wins = append(wins, w)
	}
	return wins, nil
}

// redisParseWin builds a Win from a wins-stream entry (fields user, qty, req, at). The entry id is
// the reservation id: admit.lua hands out the XADD id.
func redisParseWin(activity, id string, deliveries int64, field func(string) string) (Win, error) {
	qty, err := strconv.ParseInt(field("qty"), 10, 64)
	if err != nil {
		return Win{}, fmt.Errorf("entry %s: qty: %w", id, err)
	}
	at, err := strconv.ParseInt(field("at"), 10, 64)
	if err != nil {
		return Win{}, fmt.Errorf("entry %s: at: %w", id, err)
	}
	return Win{
		ID:            id,
		Activity:      activity,
		ReservationID: id,
		User:          field("user"),
		Qty:           qty,
		RequestID:     field("req"),
		At:            time.UnixMilli(at),
		Deliveries:    deliveries,
	}, nil
}

// Backlog implements Queue with XINFO GROUPS: the group's lag (entries never delivered) plus its
// pending count. Entries are never deleted from the wins stream, so Redis always knows the lag.
func (s *RedisStore) Backlog(ctx context.Context, activity, group string) (int64, error) {
	if err := redisCheckQueue(activity, group, "-"); err != nil {
		return 0, fmt.Errorf("backlog: %w", err)
	}
	return bucketRetry(ctx, s, activity, func(n int) (int64, error) {
		var sum int64
		for _, on := range s.keySets(activity, n) {
			v, err := s.backlogOn(ctx, activity, on, group)
			if err != nil {
				return 0, err
			}
			sum += v
		}
		return sum, nil
	})
}

func (s *RedisStore) backlogOn(ctx context.Context, activity, on, group string) (int64, error) {
	groups, err := s.client.XInfoGroups(ctx, s.key(on, "orders")).Result()
	if err != nil {
		if strings.Contains(err.Error(), "no such key") {
			if err := s.mustExist(ctx, "backlog", on); err != nil {
				return 0, err
			}
			return 0, fmt.Errorf("backlog %s: consumer group %q %w", activity, group, ErrNotFound)
		}
		return 0, fmt.Errorf("backlog %s: %w", activity, err)
	}
	for _, g := range groups {
		if g.Name != group {
			continue
		}
		if g.Lag < 0 {
			return 0, fmt.Errorf("backlog %s/%s: redis does not know the group's lag", activity, group)
		}
		return g.Lag + g.Pending, nil
	}
	if err := s.mustExist(ctx, "backlog", on); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("backlog %s: consumer group %q %w", activity, group, ErrNotFound)
}
