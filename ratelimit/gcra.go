package ratelimit

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed gcra.lua
var gcraLua string

// GCRA is a rate limit shared by every node through Redis: the generic cell rate algorithm, one
// key per limited key, decided by one script on the Redis clock (so node clocks do not matter).
// It is safe for concurrent use.
type GCRA struct {
	client redis.UniversalClient
	prefix string
	script *redis.Script
}

// NewGCRA returns a GCRA storing its state under "{prefix}:rl:{key}"; an empty prefix means
// "seckill".
func NewGCRA(client redis.UniversalClient, prefix string) *GCRA {
	if prefix == "" {
		prefix = "seckill"
	}
	return &GCRA{client: client, prefix: prefix, script: redis.NewScript(gcraLua)}
}

// Allow takes one event for key under rate r.
func (g *GCRA) Allow(ctx context.Context, key string, r Rate) (Decision, error) {
	if err := r.Validate(); err != nil {
		return Decision{}, fmt.Errorf("gcra %s: %w", key, err)
	}
	interval := r.interval().Microseconds() // Validate guarantees at least 1
	res, err := g.script.Run(ctx, g.client, []string{g.prefix + ":rl:" + key}, interval, r.Burst).Int64Slice()
	if err != nil {
		return Decision{}, fmt.Errorf("gcra %s: %w", key, err)
	}
	if len(res) != 4 {
		return Decision{}, fmt.Errorf("gcra %s: script returned %d values, want 4", key, len(res))
	}
	return Decision{
		Allowed:    res[0] == 1,
		Remaining:  int(res[1]),
		RetryAfter: time.Duration(res[2]) * time.Microsecond,
		Reset:      time.Duration(res[3]) * time.Microsecond,
	}, nil
}
