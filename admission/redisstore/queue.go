package redisstore

import (
	"context"
	_ "embed" // the queue's scripts ship inside the binary
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// The wins queue's scripts beside the store's own (scripts.go): package-level, as a redis.Script
// is immutable and shared safely. An entry of the wins stream holds the wins of one admission call
// (at, left, then a pair of fields per win: docs/admission.md, "The wins queue"), and win k of
// entry E is "E-k".
var (
	//go:embed lua/read_new.lua
	luaReadNew string
	//go:embed lua/ack.lua
	luaAck string
	//go:embed lua/backlog.lua
	luaBacklog string

	scriptReadNew = redis.NewScript(luaReadNew)
	scriptAck     = redis.NewScript(luaAck)
	scriptBacklog = redis.NewScript(luaBacklog)
)

// Bounds on consumer group and consumer names and on dead-letter reasons, which are stored.
const (
	maxQueueName   = 256
	maxQueueReason = 1024
)

// EnsureGroup creates the consumer group at the start of the activity's stream, unless it exists.
func (s *Store) EnsureGroup(ctx context.Context, activity, group string) error {
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

func (s *Store) ensureGroupOn(ctx context.Context, activity, on, group string) error {
	err := s.ensureGroup.Run(ctx, s.client, []string{s.key(on, "meta"), s.key(on, "orders")}, group).Err()
	if err != nil {
		return fmt.Errorf("ensure group %s %s: %w", activity, group, redisScriptErr(err))
	}
	return nil
}

// ReadGroup delivers wins to consumer (see Queue.ReadGroup), up to count of them: an entry
// carries all the wins of one admission call and is delivered whole, so the last entry read may
// carry the read past count (lua/read_new.lua). Both new and pending entries are read
// by scripts, which also return delivery counts and acknowledged wins; a read that finds nothing
// new waits for the next entry with a plain blocking XREAD, then reads again.
func (s *Store) ReadGroup(ctx context.Context, activity, group, consumer string, count int, block time.Duration, pending bool) ([]admission.Win, error) {
	if err := redisCheckQueue(activity, group, consumer); err != nil {
		return nil, fmt.Errorf("read group: %w", err)
	}
	if count <= 0 || block < 0 {
		return nil, fmt.Errorf("read group %s: %w", activity, admission.BadInput("count %d must be positive and block %s not negative", count, block))
	}
	return bucketRetry(ctx, s, activity, func(n int) ([]admission.Win, error) {
		if n > 1 {
			return s.readGroupBuckets(ctx, activity, n, group, consumer, count, block, pending)
		}
		return s.readGroupOn(ctx, activity, activity, group, consumer, count, block, pending)
	})
}

// readGroupOn reads from the wins stream of on: activity or one of its buckets (whose entries
// the caller renames).
func (s *Store) readGroupOn(ctx context.Context, activity, on, group, consumer string, count int, block time.Duration, pending bool) ([]admission.Win, error) {
	if pending {
		reply, err := s.runDelivery(ctx, "read pending", activity, s.readPending, luaReadPending,
			[]string{s.key(on, "meta"), s.key(on, "orders"), s.key(on, "acked")}, group, consumer, count)
		if err != nil {
			return nil, fmt.Errorf("read pending %s %s: %w", activity, group, redisScriptErr(err))
		}
		wins, err := redisParseEntries(activity, reply)
		if err != nil {
			return nil, fmt.Errorf("read pending %s %s: %w", activity, group, err)
		}
		return wins, nil
	}
	wins, err := s.readNew(ctx, activity, on, group, consumer, count, block)
	if err != nil {
		return nil, fmt.Errorf("read group %s %s: %w", activity, group, err)
	}
	return wins, nil
}

// readNew delivers new entries with read_new.lua (through runDelivery, so with ReplicasAck its
// WAIT follows it). When there are none and block allows, it waits for the stream to grow past
// the last entry the script saw, with a plain XREAD that delivers nothing, and reads again.
// go-redis cannot interrupt a blocking command when ctx is canceled, so a long wait is cut into
// slices with a context check between them.
func (s *Store) readNew(ctx context.Context, activity, on, group, consumer string, count int, block time.Duration) ([]admission.Win, error) {
	keys := []string{s.key(on, "meta"), s.key(on, "orders")}
	deadline := time.Now().Add(block)
	for {
		reply, err := s.runDelivery(ctx, "read group", activity, scriptReadNew, luaReadNew, keys, group, consumer, count)
		if err != nil {
			return nil, redisScriptErr(err)
		}
		top, empty := readNewTop(reply)
		if !empty {
			return redisParseEntries(activity, reply)
		}
		wait := min(time.Until(deadline), readBlockSlice)
		if wait < time.Millisecond {
			return nil, nil
		}
		err = s.client.XRead(ctx, &redis.XReadArgs{Streams: []string{keys[1], top}, Count: 1, Block: wait}).Err()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// readNewTop reads read_new.lua's reply for "nothing delivered": {top}, the stream's last id.
func readNewTop(reply []any) (string, bool) {
	if len(reply) != 1 {
		return "", false
	}
	top, ok := reply[0].(string)
	return top, ok
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
func (s *Store) Ack(ctx context.Context, activity, group string, ids ...string) error {
	if err := redisCheckQueue(activity, group, "-"); err != nil {
		return fmt.Errorf("ack: %w", err)
	}
	if len(ids) == 0 {
		return nil
	}
	for _, id := range ids {
		if err := redisCheckName("entry id", id, admission.MaxRequestIDLen); err != nil {
			return fmt.Errorf("ack %s: %w", activity, err)
		}
	}
	_, err := bucketRetry(ctx, s, activity, func(n int) (struct{}, error) {
		if n > 1 {
			return struct{}{}, s.ackBuckets(ctx, activity, n, group, ids)
		}
		if slices.ContainsFunc(ids, func(id string) bool { return strings.Contains(id, ".") }) {
			// A bucket's entry id while the count says unsplit: a stale count, unless the
			// activity is unsplit after all (then XACK leaves the id alone, as any unknown one).
			if err := s.mustExist(ctx, "ack", activity); err != nil {
				return struct{}{}, err
			}
		}
		return struct{}{}, s.ackOn(ctx, activity, activity, group, ids)
	})
	return err
}

// ackOn acknowledges the wins ids ("E-k") of on's stream with ack.lua, which XACKs an entry once
// all its wins are acknowledged. An id that is no win id names no win: it is left alone, as XACK
// leaves an unknown id (never XACKed as an entry id, which would acknowledge all its wins).
func (s *Store) ackOn(ctx context.Context, activity, on, group string, ids []string) error {
	wins := []any{group}
	for _, id := range ids {
		if e, k, ok := splitWinID(id); ok {
			wins = append(wins, e, k)
		}
	}
	if len(wins) == 1 {
		return nil
	}
	keys := []string{s.key(on, "meta"), s.key(on, "orders"), s.key(on, "acked")}
	if err := scriptAck.Run(ctx, s.client, keys, wins...).Err(); err != nil {
		return fmt.Errorf("ack %s %s: %w", activity, group, redisScriptErr(err))
	}
	return nil
}

// splitWinID cuts a win id "<ms>-<seq>-<k>" into its entry id and its win number k in canonical
// decimal (0 names no win, which the scripts leave alone, as XACK an unknown id); ok is false for
// anything else, an entry id "<ms>-<seq>" among them.
func splitWinID(id string) (entry, k string, ok bool) {
	ms, rest, ok1 := strings.Cut(id, "-")
	seq, ks, ok2 := strings.Cut(rest, "-")
	if !ok1 || !ok2 || !allDigits(ms) || !allDigits(seq) {
		return "", "", false
	}
	n, err := strconv.ParseUint(ks, 10, 31)
	if err != nil {
		return "", "", false
	}
	return id[:len(ms)+1+len(seq)], strconv.FormatUint(n, 10), true
}

// allDigits reports whether v is one or more decimal digits.
func allDigits(v string) bool {
	if v == "" {
		return false
	}
	for _, c := range []byte(v) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Claim transfers to consumer the entries pending longer than minIdle, with their delivery counts
// (see Queue.Claim and lua/claim.lua).
func (s *Store) Claim(ctx context.Context, activity, group, consumer string, minIdle time.Duration, count int) ([]admission.Win, error) {
	if err := redisCheckQueue(activity, group, consumer); err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	if count <= 0 || minIdle < 0 {
		return nil, fmt.Errorf("claim %s: %w", activity, admission.BadInput("count %d must be positive and min idle %s not negative", count, minIdle))
	}
	return bucketRetry(ctx, s, activity, func(n int) ([]admission.Win, error) {
		if n > 1 {
			return s.claimBuckets(ctx, activity, n, group, consumer, minIdle, count)
		}
		return s.claimOn(ctx, activity, activity, group, consumer, minIdle, count)
	})
}

func (s *Store) claimOn(ctx context.Context, activity, on, group, consumer string, minIdle time.Duration, count int) ([]admission.Win, error) {
	reply, err := s.runDelivery(ctx, "claim", activity, s.claim, luaClaim,
		[]string{s.key(on, "meta"), s.key(on, "orders"), s.key(on, "acked")}, group, consumer, minIdle.Milliseconds(), count)
	if err != nil {
		return nil, fmt.Errorf("claim %s %s: %w", activity, group, redisScriptErr(err))
	}
	wins, err := redisParseEntries(activity, reply)
	if err != nil {
		return nil, fmt.Errorf("claim %s %s: %w", activity, group, err)
	}
	return wins, nil
}

// DeadLetter copies a win to the dead-letter stream and acknowledges it, as Ack does, in one
// script (lua/dead_letter.lua). The win is read from its entry in the wins stream, not from w, so
// only w.ID ("E-k") matters; the entry stays in the wins stream, where releases and replays read
// it. A win whose entry is no longer pending in the group, or that was acknowledged, is left
// alone, which makes a repeated call harmless. An id that is no win id is ErrNotFound.
func (s *Store) DeadLetter(ctx context.Context, activity, group string, w admission.Win, reason string) error {
	if err := redisCheckQueue(activity, group, "-"); err != nil {
		return fmt.Errorf("dead letter: %w", err)
	}
	if err := redisCheckName("entry id", w.ID, admission.MaxRequestIDLen); err != nil {
		return fmt.Errorf("dead letter %s: %w", activity, err)
	}
	if len(reason) > maxQueueReason {
		return fmt.Errorf("dead letter %s: %w", activity, admission.BadInput("reason is longer than %d bytes", maxQueueReason))
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

func (s *Store) deadLetterOn(ctx context.Context, activity, on, group, id, reason string) error {
	e, k, ok := splitWinID(id)
	if !ok {
		// No win's id; what the script would answer, after the activity's check.
		if err := s.mustExist(ctx, "dead letter", on); err != nil {
			return err
		}
		return fmt.Errorf("dead letter %s %s: %w", activity, id, admission.ErrNotFound)
	}
	keys := []string{s.key(on, "meta"), s.key(on, "orders"), s.key(on, "dead"), s.key(on, "acked")}
	if err := s.deadLetter.Run(ctx, s.client, keys, group, e, k, reason).Err(); err != nil {
		return fmt.Errorf("dead letter %s %s: %w", activity, id, redisScriptErr(err))
	}
	return nil
}

// DeadLetters lists the dead-letter stream, oldest first. Each Win carries the id it had in the
// wins stream, its delivery count when it was moved, and the reason.
func (s *Store) DeadLetters(ctx context.Context, activity string, count int) ([]admission.Win, error) {
	if !admission.ValidActivityID(activity) {
		return nil, fmt.Errorf("dead letters: %w", admission.BadInput("activity id %q", activity))
	}
	if count <= 0 {
		return nil, fmt.Errorf("dead letters %s: %w", activity, admission.BadInput("count %d must be positive", count))
	}
	return bucketRetry(ctx, s, activity, func(n int) ([]admission.Win, error) {
		if n > 1 {
			return s.deadLettersBuckets(ctx, activity, n, count)
		}
		return s.deadLettersOn(ctx, activity, activity, count)
	})
}

func (s *Store) deadLettersOn(ctx context.Context, activity, on string, count int) ([]admission.Win, error) {
	msgs, err := s.client.XRangeN(ctx, s.key(on, "dead"), "-", "+", int64(count)).Result()
	if err != nil {
		return nil, fmt.Errorf("dead letters %s: %w", activity, err)
	}
	if len(msgs) == 0 {
		return nil, s.mustExist(ctx, "dead letters", on)
	}
	wins := make([]admission.Win, 0, len(msgs))
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

// mustExist returns ErrUnknownActivity (wrapped with op) when the activity has no definition.
func (s *Store) mustExist(ctx context.Context, op, activity string) error {
	ok, err := s.definedOn(ctx, activity)
	switch {
	case err != nil:
		return fmt.Errorf("%s %s: %w", op, activity, err)
	case !ok:
		return fmt.Errorf("%s %s: %w", op, activity, admission.ErrUnknownActivity)
	}
	return nil
}

// definedOn reports whether on (an activity or a bucket) holds a definition of its own. A split
// activity's parent does not: its wins, results and queue are in its buckets, and a caller that
// took it for unsplit has a stale bucket count, which ErrUnknownActivity makes it look up again.
func (s *Store) definedOn(ctx context.Context, on string) (bool, error) {
	vals, err := s.client.HMGet(ctx, s.key(on, "meta"), "start_ms", "buckets").Result()
	if err != nil {
		return false, err
	}
	return len(vals) == 2 && vals[0] != nil && vals[1] == nil, nil
}

func redisCheckQueue(activity, group, consumer string) error {
	if !admission.ValidActivityID(activity) {
		return admission.BadInput("activity id %q", activity)
	}
	if err := redisCheckName("group", group, maxQueueName); err != nil {
		return err
	}
	return redisCheckName("consumer", consumer, maxQueueName)
}

// redisParseEntries reads the scripts' {{id, deliveries, {field, value, ...}, acked}, ...}
// (acked optional) into wins: one per win of an entry that is not among its acknowledged ones.
func redisParseEntries(activity string, reply []any) ([]admission.Win, error) {
	wins := make([]admission.Win, 0, len(reply))
	for _, e := range reply {
		t, ok := e.([]any)
		if !ok || len(t) < 3 || len(t) > 4 {
			return nil, fmt.Errorf("malformed entry %v", e)
		}
		id, ok1 := t[0].(string)
		n, ok2 := t[1].(int64)
		flat, ok3 := t[2].([]any)
		acked := ""
		if len(t) == 4 {
			acked, _ = t[3].(string)
		}
		if !ok1 || !ok2 || !ok3 {
			return nil, fmt.Errorf("malformed entry %v", e)
		}
		fields := make([]string, len(flat))
		for i, f := range flat {
			fields[i], _ = f.(string)
		}
		var err error
		wins, err = appendEntryWins(wins, activity, id, n, fields, acked)
		if err != nil {
			return nil, err
		}
	}
	return wins, nil
}

// appendEntryWins appends the wins of the stream entry id (its fields in order, delivered n
// times) to wins. The entry (at, left, then a user and "<qty> <request id>" pair per win) gives
// win k the id "id-k", leaving out the k listed in acked (",k1,k2,...,").
func appendEntryWins(wins []admission.Win, activity, id string, n int64, fields []string, acked string) ([]admission.Win, error) {
	if len(fields) < 4 || fields[0] != "at" || fields[2] != "left" || len(fields)%2 != 0 {
		return wins, fmt.Errorf("entry %s: malformed entry %q", id, fields)
	}
	at, err := strconv.ParseInt(fields[1], 10, 64)
	if err != nil {
		return wins, fmt.Errorf("entry %s: at: %w", id, err)
	}
	for k, i := 1, 4; i+1 < len(fields); k, i = k+1, i+2 {
		ks := strconv.Itoa(k)
		if acked != "" && strings.Contains(acked, ","+ks+",") {
			continue
		}
		qs, req, ok := strings.Cut(fields[i+1], " ")
		qty, err := strconv.ParseInt(qs, 10, 64)
		if !ok || err != nil {
			return wins, fmt.Errorf("entry %s: win %d: malformed qty and request id %q", id, k, fields[i+1])
		}
		wid := id + "-" + ks
		wins = append(wins, admission.Win{
			ID: wid, Activity: activity, ReservationID: wid, User: fields[i], Qty: qty, RequestID: req,
			At: time.UnixMilli(at), Deliveries: n,
		})
	}
	return wins, nil
}

// redisParseWin builds a Win from a dead letter's fields user, qty, req and at; id is the win's
// id, its reservation id (lua/dead_letter.lua).
func redisParseWin(activity, id string, deliveries int64, field func(string) string) (admission.Win, error) {
	qty, err := strconv.ParseInt(field("qty"), 10, 64)
	if err != nil {
		return admission.Win{}, fmt.Errorf("entry %s: qty: %w", id, err)
	}
	at, err := strconv.ParseInt(field("at"), 10, 64)
	if err != nil {
		return admission.Win{}, fmt.Errorf("entry %s: at: %w", id, err)
	}
	return admission.Win{
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

// Backlog implements Queue in wins (lua/backlog.lua): the wins ever appended (:meta's wins) less
// those the group acknowledged (counted by ack.lua and dead_letter.lua).
func (s *Store) Backlog(ctx context.Context, activity, group string) (int64, error) {
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

func (s *Store) backlogOn(ctx context.Context, activity, on, group string) (int64, error) {
	keys := []string{s.key(on, "meta"), s.key(on, "orders"), s.key(on, "acked")}
	v, err := scriptBacklog.Run(ctx, s.client, keys, group).Int64()
	switch {
	case err == nil:
		return v, nil
	case redis.HasErrorPrefix(err, "NOGROUP"):
		return 0, fmt.Errorf("backlog %s: consumer group %q %w", activity, group, admission.ErrNotFound)
	}
	return 0, fmt.Errorf("backlog %s: %w", activity, redisScriptErr(err))
}
