package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// SetResult stores a user's latest result record as JSON in the activity's results hash.
func (s *RedisStore) SetResult(ctx context.Context, activity, user string, r Result) error {
	if err := redisCheckResult(activity, user); err != nil {
		return fmt.Errorf("set result: %w", err)
	}
	if !redisValidResultCode(r.Code) {
		return fmt.Errorf("set result %s: %w", activity, badInput("result code %q", r.Code))
	}
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("set result %s: %w", activity, err)
	}
	err = s.setResult.Run(ctx, s.client, []string{s.key(activity, "meta"), s.key(activity, "results")}, user, b).Err()
	if err != nil {
		return fmt.Errorf("set result %s: %w", activity, redisScriptErr(err))
	}
	return nil
}

// GetResult reads a user's latest result record; ErrNotFound when the user has none.
func (s *RedisStore) GetResult(ctx context.Context, activity, user string) (Result, error) {
	if err := redisCheckResult(activity, user); err != nil {
		return Result{}, fmt.Errorf("get result: %w", err)
	}
	b, err := s.hot.HGet(ctx, s.key(activity, "results"), user).Bytes()
	if errors.Is(err, redis.Nil) {
		// Only a miss pays for the second round trip that tells "no result" from "no activity".
		if err := s.mustExist(ctx, "get result", activity); err != nil {
			return Result{}, err
		}
		return Result{}, fmt.Errorf("get result %s: %w", activity, ErrNotFound)
	}
	if err != nil {
		return Result{}, fmt.Errorf("get result %s: %w", activity, err)
	}
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		return Result{}, fmt.Errorf("get result %s: %w", activity, err)
	}
	return r, nil
}

// Restocks subscribes to the restock channel and delivers activity ids until ctx is done or the
// store is closed; the returned channel is then closed. The subscription is confirmed before
// Restocks returns, so no release published after that is missed while the connection holds.
// After a reconnect the client subscribes again; releases published in between are lost, which
// is why Guard also probes.
func (s *RedisStore) Restocks(ctx context.Context) (<-chan string, error) {
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
	if !ValidActivityID(activity) {
		return badInput("activity id %q", activity)
	}
	return redisCheckName("user id", user, MaxUserIDLen)
}

// redisValidResultCode accepts the result words buyers poll (see Result.Code).
func redisValidResultCode(c string) bool {
	switch c {
	case "none", "queued", "pending_payment", "paid", "cancelled", "failed":
		return true
	}
	return false
}
