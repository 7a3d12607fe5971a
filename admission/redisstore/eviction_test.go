package redisstore

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestWarnEvictionPolicy: a Redis that may evict keys is named in a warning at start; one with
// Redis's default noeviction is not.
func TestWarnEvictionPolicy(t *testing.T) {
	for _, c := range []struct {
		args []string
		warn bool
	}{
		{nil, false},
		{[]string{"--maxmemory-policy", "allkeys-lru"}, true},
	} {
		srv := testsrv.StartRedis(t, testsrv.WithArgs(c.args...))
		client := redis.NewClient(&redis.Options{Addr: srv.Addr})
		core, logs := observer.New(zap.WarnLevel)
		policy := warnEvictionPolicy(context.Background(), client, zap.New(core))
		_ = client.Close()
		if got := logs.FilterMessageSnippet("maxmemory-policy noeviction").Len(); (got > 0) != c.warn {
			t.Errorf("policy %q: %d warnings, want a warning: %v", policy, got, c.warn)
		}
	}
}
