package redisstore

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// Replay returns the stored first answer of user's request id (see admission.Admitter.Replay and
// lua/replay.lua): one read-only script call on the user's key set, the home bucket of a split
// activity. With Options.ReplicasAck a WAIT follows it, as a result poll's does (confirmWins):
// a win the master answered ErrNotReplicated for is not replayed before the replicas have it.
func (s *Store) Replay(ctx context.Context, activity, user, requestID string) (admission.Decision, error) {
	if err := admission.CheckReplay(activity, user, requestID); err != nil {
		return admission.Decision{}, fmt.Errorf("replay: %w", err)
	}
	return bucketRetry(ctx, s, activity, func(n int) (admission.Decision, error) {
		if n == 1 {
			return s.replayOn(ctx, activity, activity, user, requestID)
		}
		home := admission.HomeBucket(user, n)
		d, err := s.replayOn(ctx, activity, bucketID(activity, home, n), user, requestID)
		if err != nil {
			return admission.Decision{}, fmt.Errorf("bucket %d: %w", home, err)
		}
		// As Admit's replay in a home bucket answers it (admitBuckets).
		d.ReservationID = bucketEntryID(d.ReservationID, home)
		d.RemainingPartial = true
		return d, nil
	})
}

// replayOn runs replay.lua on the key set of on (activity, or one of its buckets).
func (s *Store) replayOn(ctx context.Context, activity, on, user, requestID string) (admission.Decision, error) {
	keys := []string{s.key(on, "meta"), s.key(on, "users"), s.key(on, "orders")}
	var cmd *redis.Cmd
	var acked int64
	var waitErr error
	if s.ack != nil {
		cmd, acked, waitErr = s.evalAcked(ctx, scriptReplay, luaReplay, keys, user, requestID)
	} else {
		cmd = scriptReplay.Run(ctx, s.hot, keys, user, requestID)
	}
	reply, err := cmd.Slice()
	if err == nil {
		err = waitErr
	}
	if err != nil {
		return admission.Decision{}, fmt.Errorf("replay %s: %w", activity, redisScriptErr(err))
	}
	var resv string
	var left, qty int64
	ok := len(reply) == 3
	if ok {
		resv, ok = reply[0].(string)
	}
	if ok {
		left, ok = reply[1].(int64)
	}
	if ok {
		qty, ok = reply[2].(int64)
		ok = ok && qty >= 1
	}
	if !ok {
		return admission.Decision{}, fmt.Errorf("replay %s: malformed reply %v", activity, reply)
	}
	if s.ack != nil && acked < s.ack.n {
		return admission.Decision{}, &admission.ReplicationError{
			Op: "replay", Activity: activity, Wanted: s.ack.n, Acked: acked, ReservationID: resv,
		}
	}
	return admission.Decision{Outcome: admission.Won, ReservationID: resv, Remaining: left, Replayed: true, Qty: qty}, nil
}
