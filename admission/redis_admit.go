package admission

import (
	"context"
	"fmt"
)

// Admit takes one admission decision (see Store.Admit and lua/admit.lua). Concurrent calls for
// one activity share script calls (group admission, see redis_batch.go) unless
// RedisOptions.AdmitBatch is 1.
func (s *RedisStore) Admit(ctx context.Context, r Request) (Decision, error) {
	if err := r.validate(); err != nil {
		return Decision{}, fmt.Errorf("admit: %w", err)
	}
	if s.groups != nil {
		return s.groups.admit(ctx, r)
	}
	// A batch of one, run here: the same script, reply parsing and errors as a group.
	c := &admitCall{req: r, done: make(chan admitAnswer, 1)}
	s.runAdmitBatch(ctx, r.Activity, []*admitCall{c})
	a := <-c.done
	return a.d, a.err
}

// admitKeys returns admit.lua's KEYS for activity.
func (s *RedisStore) admitKeys(activity string) []string {
	return []string{
		s.key(activity, "meta"), s.key(activity, "stock"), s.key(activity, "buyers"),
		s.key(activity, "req"), s.key(activity, "orders"), s.key(activity, "resv"),
		s.key(activity, "results"),
	}
}

// redisParseDecision reads one of admit.lua's {outcome, remaining, reservation_id, replayed};
// outcome 0 (qty above the limit) is returned as Outcome 0 for the caller to turn into an error.
func redisParseDecision(v []any) (Decision, error) {
	if len(v) != 4 {
		return Decision{}, fmt.Errorf("malformed admit reply: %d elements", len(v))
	}
	code, ok1 := v[0].(int64)
	left, ok2 := v[1].(int64)
	resv, ok3 := v[2].(string)
	replayed, ok4 := v[3].(int64)
	if !ok1 || !ok2 || !ok3 || !ok4 || code < 0 || code > int64(Ended) {
		return Decision{}, fmt.Errorf("malformed admit reply %v", v)
	}
	return Decision{Outcome: Outcome(code), ReservationID: resv, Remaining: left, Replayed: replayed == 1}, nil
}

// Release gives a reservation back exactly once (see Store.Release and lua/release.lua). Each call
// carries a random token, so that when the client retries the script after a dropped connection
// the retry of the releasing call still reports true.
func (s *RedisStore) Release(ctx context.Context, activity, reservationID string) (bool, error) {
	if !ValidActivityID(activity) {
		return false, fmt.Errorf("release: %w", badInput("activity id %q", activity))
	}
	if err := redisCheckName("reservation id", reservationID, MaxRequestIDLen); err != nil {
		return false, fmt.Errorf("release %s: %w", activity, err)
	}
	keys := []string{
		s.key(activity, "meta"), s.key(activity, "stock"), s.key(activity, "buyers"),
		s.key(activity, "released"), s.key(activity, "resv"),
	}
	n, err := s.release.Run(ctx, s.hot, keys, reservationID, NewSalt(), s.channel, activity).Int64()
	if err != nil {
		return false, fmt.Errorf("release %s %s: %w", activity, reservationID, redisScriptErr(err))
	}
	return n == 1, nil
}
