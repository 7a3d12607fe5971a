package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// Admit takes one admission decision (see Store.Admit and lua/admit.lua). Concurrent calls for
// one activity share script calls (group admission, see redis_batch.go) unless
// Options.AdmitBatch is 1.
func (s *Store) Admit(ctx context.Context, r admission.Request) (admission.Decision, error) {
	if err := r.Validate(); err != nil {
		return admission.Decision{}, fmt.Errorf("admit: %w", err)
	}
	return bucketRetry(ctx, s, r.Activity, func(n int) (admission.Decision, error) {
		if n > 1 {
			return s.admitBuckets(ctx, r, n)
		}
		return s.admitOn(ctx, r)
	})
}

// admitOn takes the decision on the key set of r.Activity: an activity or one bucket of one.
func (s *Store) admitOn(ctx context.Context, r admission.Request) (admission.Decision, error) {
	if s.groups != nil {
		return s.groups.admit(ctx, r)
	}
	// A batch of one, run here: the same script, reply parsing and errors as a group.
	c := &admitCall{req: r}
	reply, acked, err := s.runAdmit(ctx, r.Activity, []*admitCall{c})
	if err != nil {
		return admission.Decision{}, err
	}
	d, err := admitDecision(reply, 0, r.Activity, r.Qty)
	if err != nil {
		return admission.Decision{}, err
	}
	return s.checkAcked(r.Activity, d, acked)
}

// admitKeys returns admit.lua's KEYS for activity.
func (s *Store) admitKeys(activity string) []string {
	return []string{s.key(activity, "meta"), s.key(activity, "stock"), s.key(activity, "users"), s.key(activity, "orders")}
}

// redisParseDecision reads one of admit.lua's {outcome, remaining, reservation_id, replayed},
// read as strings (runAdmit); outcome 0 (qty above the limit) is returned as Outcome 0 for the
// caller to turn into an error.
func redisParseDecision(v []string) (admission.Decision, error) {
	if len(v) != 4 {
		return admission.Decision{}, fmt.Errorf("malformed admit reply: %d elements", len(v))
	}
	var code int64 = -1
	if len(v[0]) == 1 { // 0 to 5
		code = int64(v[0][0]) - '0'
	}
	left, err := strconv.ParseInt(v[1], 10, 64)
	if err != nil || code < 0 || code > int64(admission.Ended) || (v[3] != "0" && v[3] != "1") {
		return admission.Decision{}, fmt.Errorf("malformed admit reply %q", v)
	}
	return admission.Decision{Outcome: admission.Outcome(code), ReservationID: v[2], Remaining: left, Replayed: v[3] == "1"}, nil
}

// Release gives a reservation back exactly once (see Store.Release and lua/release.lua). Each call
// carries a random token, so that when the client retries the script after a dropped connection
// the retry of the releasing call still reports true.
func (s *Store) Release(ctx context.Context, activity, reservationID string) (bool, error) {
	if !admission.ValidActivityID(activity) {
		return false, fmt.Errorf("release: %w", admission.BadInput("activity id %q", activity))
	}
	if err := redisCheckName("reservation id", reservationID, admission.MaxRequestIDLen); err != nil {
		return false, fmt.Errorf("release %s: %w", activity, err)
	}
	return bucketRetry(ctx, s, activity, func(n int) (bool, error) {
		if n > 1 {
			return s.releaseBuckets(ctx, activity, reservationID, n)
		}
		return s.releaseOn(ctx, activity, activity, reservationID)
	})
}

// releaseOn releases on the key set of on (activity, or one of its buckets); activity is
// announced on the restock channel.
func (s *Store) releaseOn(ctx context.Context, activity, on, reservationID string) (bool, error) {
	keys := []string{
		s.key(on, "meta"), s.key(on, "stock"), s.key(on, "users"),
		s.key(on, "released"), s.key(on, "orders"),
	}
	if s.ack != nil {
		return s.releaseAcked(ctx, activity, reservationID, keys)
	}
	n, err := s.release.Run(ctx, s.hot, keys, reservationID, admission.NewSalt(), s.channel, activity).Int64()
	if err != nil {
		return false, fmt.Errorf("release %s %s: %w", activity, reservationID, redisScriptErr(err))
	}
	return n == 1, nil
}

// releaseAcked is Release with Options.ReplicasAck: a release the replicas do not confirm
// answers a *ReplicationError, so that the caller (the order backend's relay) tries again. A
// repeated release answers false but writes its token again (release.lua), so its WAIT covers the
// first release, and only a confirmed one ends the retries.
func (s *Store) releaseAcked(ctx context.Context, activity, reservationID string, keys []string) (bool, error) {
	cmd, acked, waitErr := s.evalAcked(ctx, s.release, luaRelease, keys, reservationID, admission.NewSalt(), s.channel, activity)
	n, err := cmd.Int64()
	if err == nil {
		err = waitErr
	}
	if err != nil {
		return false, fmt.Errorf("release %s %s: %w", activity, reservationID, redisScriptErr(err))
	}
	if acked < s.ack.n {
		return false, &admission.ReplicationError{
			Op: "release", Activity: activity, Wanted: s.ack.n, Acked: acked, ReservationID: reservationID,
		}
	}
	return n == 1, nil
}
