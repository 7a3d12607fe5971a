package caddymodule

import (
	"context"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// warnEvictionPolicy logs a warning when Redis may evict keys under memory pressure: the store's
// keys (stock, buyers, reservations) must never go, or a sale oversells, loses wins or cannot give
// unpaid items back (a release of an evicted reservation is answered not found and dropped). A
// server that refuses CONFIG (a managed Redis) is not checked. It returns the policy read ("" when
// it could not be read).
func warnEvictionPolicy(ctx context.Context, client redis.UniversalClient, logger *zap.Logger) string {
	m, err := client.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		logger.Debug("cannot read redis maxmemory-policy", zap.Error(err))
		return ""
	}
	policy := m["maxmemory-policy"]
	if policy != "" && policy != "noeviction" {
		logger.Warn("redis may evict the sale's keys under memory pressure: set maxmemory-policy noeviction",
			zap.String("maxmemory-policy", policy))
	}
	return policy
}
