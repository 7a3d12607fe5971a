package redisstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// SetResult stores a result record as JSON in the activity's results hash (lua/set_result.lua
// folds it into the user's records, after the "queued" records of the user's wins not folded yet).
func (s *Store) SetResult(ctx context.Context, activity, user string, r admission.Result) error {
	if err := redisCheckResult(activity, user); err != nil {
		return fmt.Errorf("set result: %w", err)
	}
	if err := admission.CheckResultRecord(r); err != nil {
		return fmt.Errorf("set result %s: %w", activity, err)
	}
	_, err := bucketRetry(ctx, s, activity, func(n int) (struct{}, error) {
		if n > 1 {
			return struct{}{}, s.setResultBuckets(ctx, activity, user, r, n)
		}
		return struct{}{}, s.setResultOn(ctx, activity, activity, user, r)
	})
	return err
}

// setResultOn stores the record in the key set of on: activity or one of its buckets.
func (s *Store) setResultOn(ctx context.Context, activity, on, user string, r admission.Result) error {
	// encoding/json's encoding, written without reflection: the text polls hand on (AppendResult).
	b := admission.AppendResultJSON(nil, admission.WithoutReservations(r))
	keys := []string{s.key(on, "meta"), s.key(on, "results"), s.key(on, "users")}
	err := s.setResult.Run(ctx, s.client, keys, user, b, r.ReservationID, admission.MaxResultReservations).Err()
	if err != nil {
		return fmt.Errorf("set result %s: %w", activity, redisScriptErr(err))
	}
	return nil
}

// GetResult reads a user's latest result record, with the record of each reservation once there
// are two; ErrNotFound when the user has none.
func (s *Store) GetResult(ctx context.Context, activity, user string) (admission.Result, error) {
	if err := redisCheckResult(activity, user); err != nil {
		return admission.Result{}, fmt.Errorf("get result: %w", err)
	}
	return bucketRetry(ctx, s, activity, func(n int) (admission.Result, error) {
		if n > 1 {
			return s.getResultBuckets(ctx, activity, user, n)
		}
		return s.getResultOn(ctx, activity, activity, user)
	})
}

// getResultOn reads the record from the key set of on: activity or one of its buckets.
func (s *Store) getResultOn(ctx context.Context, activity, on, user string) (admission.Result, error) {
	r, found, err := s.readResult(ctx, on, user)
	if err != nil {
		return admission.Result{}, fmt.Errorf("get result %s: %w", activity, err)
	}
	if !found {
		// Only a miss pays for the second round trip that tells "no result" from "no activity".
		if err := s.mustExist(ctx, "get result", on); err != nil {
			return admission.Result{}, err
		}
		return admission.Result{}, fmt.Errorf("get result %s: %w", activity, admission.ErrNotFound)
	}
	return r, nil
}

// readResult reads user's records from the key set of on: the stored ones (readResultRaw), the
// records of the user's reservations if they have a list, and the wins not folded into :results
// yet folded in. found is false when the user has neither a record nor a win.
func (s *Store) readResult(ctx context.Context, on, user string) (r admission.Result, found bool, err error) {
	top, list, ids, err := s.readResultRaw(ctx, on, user)
	if err != nil || (top == "" && len(ids) == 0) {
		return admission.Result{}, false, err
	}
	return s.foldStored(ctx, on, user, top, list, ids)
}

// foldStored decodes the stored records top and list (as withReservations) and folds the wins
// ids into them.
func (s *Store) foldStored(ctx context.Context, on, user, top, list string, ids []string) (r admission.Result, found bool, err error) {
	if top != "" {
		if r, err = s.withReservations(ctx, on, user, top, list); err != nil {
			return admission.Result{}, false, err
		}
	}
	if len(ids) > 0 {
		t, l := foldWins(admission.WithoutReservations(r), top != "", r.Reservations, ids)
		r = t
		r.Reservations = l
	}
	return r, true, nil
}

// readResultRaw reads the user's latest record and list of reservation ids from :results and
// their :users field in one round trip (the keys share a slot), and returns the reservation ids of
// the wins not folded into :results yet. The commands are HMGETs, not HGETs: a missing field is
// then a nil element rather than a redis.Nil error, which go-redis runs through its retry
// classification (a dozen errors.As calls, about twenty allocations) before returning it.
func (s *Store) readResultRaw(ctx context.Context, on, user string) (top, list string, ids []string, err error) {
	var res, fld *redis.SliceCmd
	_, err = s.hot.Pipelined(ctx, func(p redis.Pipeliner) error {
		res = p.HMGet(ctx, s.key(on, "results"), user, user+"\x00")
		fld = p.HMGet(ctx, s.key(on, "users"), user)
		return nil
	})
	if err != nil {
		return "", "", nil, err
	}
	rv, fv := res.Val(), fld.Val()
	if len(rv) != 2 || len(fv) != 1 {
		return "", "", nil, fmt.Errorf("malformed hmget reply: %d and %d elements", len(rv), len(fv))
	}
	top, _ = rv[0].(string)
	list, _ = rv[1].(string)
	if v, ok := fv[0].(string); ok {
		f, err := parseUserField(v)
		if err != nil {
			return "", "", nil, err
		}
		ids = f.unfolded()
	}
	if len(ids) > 0 && s.ack != nil {
		if err := s.confirmWins(ctx, on); err != nil {
			return "", "", nil, err
		}
	}
	return top, list, ids, nil
}

// confirmWins is readResultRaw's check, with Options.ReplicasAck, that the wins it read and
// shows as "queued" are on the replicas: a win the master answered ErrNotReplicated for (503
// busy, "unknown") must not be reported to its buyer by a poll, since a failover now would lose
// it. A PING and a WAIT go to the master of on's slot on one connection; on Redis 7.0 any
// command sets the offset its connection's WAIT waits for (ack.go), so the WAIT covers every
// write the master made before the read, the wins included. Too few replicas: a
// *ReplicationError, which the edge answers 503 busy.
func (s *Store) confirmWins(ctx context.Context, on string) error {
	ping := redis.NewStatusCmd(ctx, "ping")
	acked, err := s.ack.send(ctx, s.key(on, "users"), ping)
	if err == nil {
		err = ping.Err()
	}
	if err != nil {
		return err
	}
	if acked < s.ack.n {
		return &admission.ReplicationError{Op: "get result", Activity: on, Wanted: s.ack.n, Acked: acked}
	}
	return nil
}

// foldWins folds the "queued" record of each win in ids, in order, into a user's latest record
// and per-reservation records, as set_result.lua's record_win writes them before it folds a
// record: what a poll shows for the wins set_result.lua has not folded yet.
func foldWins(top admission.Result, hasTop bool, list []admission.Result, ids []string) (admission.Result, []admission.Result) {
	for _, id := range ids {
		top, list = admission.FoldResult(top, hasTop, list, admission.Result{Code: "queued", ReservationID: id}, true)
		hasTop = true
	}
	return top, list
}

// withReservations decodes the latest record top and, when list (the user's reservation ids) is
// not empty, reads the record of each into Reservations. An id whose record is missing is
// skipped.
func (s *Store) withReservations(ctx context.Context, activity, user, top, list string) (admission.Result, error) {
	r, err := admission.DecodeResult(top)
	if err != nil || list == "" {
		return r, err
	}
	ids := strings.Fields(list)
	fields := make([]string, len(ids))
	for i, id := range ids {
		fields[i] = user + "\x00" + id
	}
	vals, err := s.hot.HMGet(ctx, s.key(activity, "results"), fields...).Result()
	if err != nil {
		return admission.Result{}, err
	}
	r.Reservations = make([]admission.Result, 0, len(vals))
	for _, v := range vals {
		if v, ok := v.(string); ok {
			e, err := admission.DecodeResult(v)
			if err != nil {
				return admission.Result{}, err
			}
			r.Reservations = append(r.Reservations, e)
		}
	}
	return r, nil
}

// AppendResult implements Store with one round trip (through the auto-pipeliner when it is on):
// the stored JSON goes to dst as it is when it is in encoding/json's encoding, which is how
// SetResult writes it, and every win of the user is folded into :results and they have one
// reservation; otherwise the records and the unfolded wins are folded (readResult) and encoded. A
// miss is ErrNotFound without the second round trip GetResult pays to tell an unknown activity
// apart. A user with several reservations costs a second round trip, for their records.
func (s *Store) AppendResult(ctx context.Context, dst []byte, activity, user string) ([]byte, string, error) {
	if err := redisCheckResult(activity, user); err != nil {
		return dst, "", fmt.Errorf("get result: %w", err)
	}
	if n, err := s.bucketCount(ctx, activity); err != nil || n > 1 {
		if err != nil {
			return dst, "", fmt.Errorf("get result %s: %w", activity, err)
		}
		// A split activity's records are shown with other ids than stored: encoded again.
		r, err := s.getResultBuckets(ctx, activity, user, n)
		if err != nil {
			return dst, "", err
		}
		return admission.AppendResultJSON(dst, r), r.Code, nil
	}
	top, list, ids, err := s.readResultRaw(ctx, activity, user)
	if err != nil {
		return dst, "", fmt.Errorf("get result %s: %w", activity, err)
	}
	if top == "" && len(ids) == 0 {
		return dst, "", fmt.Errorf("get result %s: %w", activity, admission.ErrNotFound)
	}
	if len(ids) == 0 && list == "" {
		out, code, err := admission.AppendStoredResult(dst, top)
		if err != nil {
			return dst, "", fmt.Errorf("get result %s: %w", activity, err)
		}
		return out, code, nil
	}
	r, _, err := s.foldStored(ctx, activity, user, top, list, ids)
	if err != nil {
		return dst, "", fmt.Errorf("get result %s: %w", activity, err)
	}
	return admission.AppendResultJSON(dst, r), r.Code, nil
}

// Restocks subscribes to the restock channel and delivers activity ids until ctx is done or the
// store is closed; the returned channel is then closed. The subscription is confirmed before
// Restocks returns, so no release published after that is missed while the connection holds.
// After a reconnect the client subscribes again; releases published in between are lost, which
// is why Guard also probes.
func (s *Store) Restocks(ctx context.Context) (<-chan string, error) {
	ps := s.client.Subscribe(ctx, s.channel)
	if _, err := ps.Receive(ctx); err != nil {
		_ = ps.Close()
		return nil, fmt.Errorf("restocks: subscribe %s: %w", s.channel, err)
	}
	in := ps.Channel()
	out := make(chan string, 16)
	go func() {
		defer close(out)
		defer func() { _ = ps.Close() }()
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.closed:
				return
			case m, ok := <-in:
				if !ok {
					return
				}
				select {
				case out <- m.Payload:
				case <-ctx.Done():
					return
				case <-s.closed:
					return
				}
			}
		}
	}()
	return out, nil
}

func redisCheckResult(activity, user string) error {
	if !admission.ValidActivityID(activity) {
		return admission.BadInput("activity id %q", activity)
	}
	return admission.CheckUserID(user)
}
