package captcha

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed fetch.lua
var fetchLua string

//go:embed take.lua
var takeLua string

// redisStore keeps each captcha in three keys sharing one hash tag (so that they may be used
// together on Redis Cluster): the challenge, its PNG and its fetch counter. Take checks the owner
// and deletes the keys in one script (take.lua), which makes a captcha single use across every
// node and leaves another owner's attempt without effect.
type redisStore struct {
	client redis.UniversalClient
	prefix string
	fetch  *redis.Script
	take   *redis.Script
}

// NewRedisStore returns a Store in Redis under "{prefix}:captcha:{id}" (the challenge), with
// ":png" and ":fetches" suffixes for the image and the fetch counter; the braces around the id are
// literal, a Redis Cluster hash tag. An empty prefix means "seckill".
func NewRedisStore(client redis.UniversalClient, prefix string) Store {
	if prefix == "" {
		prefix = "seckill"
	}
	return &redisStore{client: client, prefix: prefix, fetch: redis.NewScript(fetchLua), take: redis.NewScript(takeLua)}
}

// stored is the challenge as kept in Redis, without the PNG. take.lua reads u and a.
type stored struct {
	User     string `json:"u"`
	Activity string `json:"a"`
	Digits   []byte `json:"d"`
}

func (s *redisStore) keys(id string) (challenge, png, fetches string) {
	base := s.prefix + ":captcha:{" + id + "}"
	return base, base + ":png", base + ":fetches"
}

func (s *redisStore) Put(ctx context.Context, id string, c Challenge, ttl time.Duration) error {
	if !validID(id) {
		return fmt.Errorf("put captcha %q: invalid id", id)
	}
	if ttl < time.Millisecond {
		return fmt.Errorf("put captcha %s: ttl %v is below 1ms", id, ttl)
	}
	v, err := json.Marshal(stored{User: c.User, Activity: c.Activity, Digits: c.Digits})
	if err != nil {
		return fmt.Errorf("put captcha %s: %w", id, err)
	}
	kc, kp, kf := s.keys(id)
	_, err = s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, kc, v, ttl)
		p.Set(ctx, kp, c.PNG, ttl)
		p.Del(ctx, kf)
		return nil
	})
	if err != nil {
		return fmt.Errorf("put captcha %s: %w", id, err)
	}
	return nil
}

func (s *redisStore) Take(ctx context.Context, id string, owner Owner) (Challenge, error) {
	if !validID(id) {
		return Challenge{}, ErrNotFound
	}
	kc, kp, kf := s.keys(id)
	v, err := s.take.Run(ctx, s.client, []string{kc, kp, kf}, owner.User, owner.Activity).Text()
	if errors.Is(err, redis.Nil) {
		return Challenge{}, ErrNotFound
	}
	if err != nil {
		return Challenge{}, fmt.Errorf("take captcha %s: %w", id, err)
	}
	return decode(id, []byte(v), nil)
}

func (s *redisStore) Peek(ctx context.Context, id string) (Challenge, error) {
	if !validID(id) {
		return Challenge{}, ErrNotFound
	}
	kc, kp, _ := s.keys(id)
	vals, err := s.client.MGet(ctx, kc, kp).Result()
	if err != nil {
		return Challenge{}, fmt.Errorf("peek captcha %s: %w", id, err)
	}
	v, ok := vals[0].(string)
	if !ok {
		return Challenge{}, ErrNotFound
	}
	png, _ := vals[1].(string)
	return decode(id, []byte(v), []byte(png))
}

func (s *redisStore) CountFetch(ctx context.Context, id string) (int64, error) {
	if !validID(id) {
		return 0, ErrNotFound
	}
	kc, _, kf := s.keys(id)
	n, err := s.fetch.Run(ctx, s.client, []string{kc, kf}).Int64()
	if err != nil {
		return 0, fmt.Errorf("count fetch of captcha %s: %w", id, err)
	}
	if n < 0 {
		return 0, ErrNotFound
	}
	return n, nil
}

func decode(id string, v, png []byte) (Challenge, error) {
	var st stored
	if err := json.Unmarshal(v, &st); err != nil {
		return Challenge{}, fmt.Errorf("decode captcha %s: %w", id, err)
	}
	return Challenge{User: st.User, Activity: st.Activity, Digits: st.Digits, PNG: png}, nil
}
