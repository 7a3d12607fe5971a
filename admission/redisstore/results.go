package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// SetResult stores a result record as JSON in the activity's results hash (lua/set_result.lua
// folds it into the user's records).
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
	_, err := layoutRetry(ctx, s, on, func(layout int) (struct{}, error) {
		script, keys := s.setResult, []string{s.key(on, "meta"), s.key(on, "results")}
		if layout == redisLayout2 {
			script, keys = s.setResult2, append(keys, s.key(on, "users"))
		}
		err := script.Run(ctx, s.client, keys, user, b, r.ReservationID, admission.MaxResultReservations).Err()
		if err != nil {
			return struct{}{}, fmt.Errorf("set result %s: %w", activity, redisScriptErr(err))
		}
		return struct{}{}, nil
	})
	return err
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
	layout, err := s.layoutOf(ctx, on)
	if err != nil {
		return admission.Result{}, fmt.Errorf("get result %s: %w", activity, err)
	}
	if layout == redisLayout2 {
		r, found, err := s.readResultV2(ctx, on, user)
		if err != nil {
			return admission.Result{}, fmt.Errorf("get result %s: %w", activity, err)
		}
		if !found {
			if err := s.mustExist(ctx, "get result", on); err != nil {
				return admission.Result{}, err
			}
			return admission.Result{}, fmt.Errorf("get result %s: %w", activity, admission.ErrNotFound)
		}
		return r, nil
	}
	vals, err := s.hot.HMGet(ctx, s.key(on, "results"), user, user+"\x00").Result()
	if err == nil && len(vals) != 2 {
		err = fmt.Errorf("malformed hmget reply: %d elements", len(vals))
	}
	if err == nil && vals[0] == nil {
		err = redis.Nil
	}
	if errors.Is(err, redis.Nil) {
		// Only a miss pays for the second round trip that tells "no result" from "no activity".
		if err := s.mustExist(ctx, "get result", on); err != nil {
			return admission.Result{}, err
		}
		return admission.Result{}, fmt.Errorf("get result %s: %w", activity, admission.ErrNotFound)
	}
	if err != nil {
		return admission.Result{}, fmt.Errorf("get result %s: %w", activity, err)
	}
	top, _ := vals[0].(string)
	list, _ := vals[1].(string)
	r, err := s.withReservations(ctx, on, user, top, list)
	if err != nil {
		return admission.Result{}, fmt.Errorf("get result %s: %w", activity, err)
	}
	return r, nil
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
// admit.lua and SetResult write it. A miss is ErrNotFound without the second round trip
// GetResult pays to tell an unknown activity apart.
//
// The command is HMGET, not HGET: a missing field is then a nil element rather than a redis.Nil
// error, which go-redis runs through its retry classification (a dozen errors.As calls, about
// twenty allocations) before returning it. It reads two fields, the latest record and the user's
// list of reservation ids: a user with several reservations costs a second round trip, for their
// records, and an answer encoded again.
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
	layout, err := s.layoutOf(ctx, activity)
	if err != nil {
		return dst, "", fmt.Errorf("get result %s: %w", activity, err)
	}
	if layout == redisLayout2 {
		return s.appendResultV2(ctx, dst, activity, user)
	}
	cmd := redis.NewStringSliceCmd(ctx, "hmget", s.hotKeys(activity).results, user, user+"\x00")
	cmd.SetFirstKeyPos(1)
	_ = s.hotProc.Process(ctx, cmd)
	vals, err := cmd.Result()
	if err == nil && len(vals) != 2 {
		err = fmt.Errorf("malformed hmget reply: %d elements", len(vals))
	}
	if err != nil {
		return dst, "", fmt.Errorf("get result %s: %w", activity, err)
	}
	if vals[0] == "" { // a nil element: no record (a stored record is never empty)
		return dst, "", fmt.Errorf("get result %s: %w", activity, admission.ErrNotFound)
	}
	if vals[1] != "" { // several reservations
		r, err := s.withReservations(ctx, activity, user, vals[0], vals[1])
		if err != nil {
			return dst, "", fmt.Errorf("get result %s: %w", activity, err)
		}
		return admission.AppendResultJSON(dst, r), r.Code, nil
	}
	out, code, err := admission.AppendStoredResult(dst, vals[0])
	if err != nil {
		return dst, "", fmt.Errorf("get result %s: %w", activity, err)
	}
	return out, code, nil
}

// appendResultV2 is AppendResult for a layout-2 activity (not split): the stored record handed on
// as it is when every win of the user is folded into :results and they have one reservation,
// else the records folded with the unfolded wins (readResultV2) and encoded.
func (s *Store) appendResultV2(ctx context.Context, dst []byte, activity, user string) ([]byte, string, error) {
	top, list, ids, err := s.readResultV2Raw(ctx, activity, user)
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
	r, _, err := s.foldResultV2(ctx, activity, user, top, list, ids)
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
