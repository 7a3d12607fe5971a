// Package ticker runs a function at a fixed interval until a context ends: the loop behind the
// Guard's sold-out probe, the Redis store's bucket rebalancer and the gateway's activity refresh.
package ticker

import (
	"context"
	"time"
)

// Every calls fn every interval, the first time one interval after the call, until ctx is done.
// It returns once ctx is done; a call of fn already running is waited for, never cut short, so
// fn should watch ctx itself when it may take long.
func Every(ctx context.Context, interval time.Duration, fn func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}
