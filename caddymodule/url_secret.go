package caddymodule

import (
	"crypto/sha256"
	"time"

	"go.uber.org/zap"
)

// warnURLSecretChanged logs a warning when this start changes the buy paths' secret of the
// store's previous configuration (a reload with another url_secret) while a sale hands out
// paths: every path given out before is refused (404 bad_path), and its buyers must ask for a new
// one. A reload may do it (a leaked secret must be replaced), so it warns rather than refuses.
// It runs at the end of Start, where nothing fails any more.
func (a *App) warnURLSecretChanged(now time.Time) {
	sum := sha256.Sum256(a.urlSecret)
	prev := a.backend.pathKeySum.Swap(&sum)
	if prev == nil || *prev == sum {
		return
	}
	running := a.acts.pathsOut(now)
	if len(running) == 0 {
		return
	}
	a.logger.Warn("url_secret changed while a sale runs: every buy path handed out before is refused "+
		"(404 bad_path) and its buyer must fetch a new one with the path call",
		zap.Strings("activities", running))
}
