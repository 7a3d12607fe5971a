package chaos

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/internal/proc"
)

// Bounds of the gateway's Redis client and breaker (caddymodule/README.md, "Redis client"): one
// command retry, and a breaker that lets a trial call through every half second while open.
const (
	gatewayCommandRetries = 1
	breakerOpenTimeout    = 500 * time.Millisecond
)

// TestRedisPaused is scenario 2: redis-server is stopped (SIGSTOP) for 5 s mid-sale, then
// continued. The gateway's calls time out and its breaker opens (503 busy); impatient buyers keep
// hammering it, and the number of admission scripts the pause window makes Redis run is bounded
// by the requests in flight, not by the buys sent (no retry storm); no Idempotency-Key is admitted
// twice, no user is above the limit, and reconcile passes.
//
// The order backend starts after the pauses, so that every script Redis runs in the measured
// window is an admission (INFO commandstats counts EVALSHA of every client alike).
func TestRedisPaused(t *testing.T) {
	m := currentMode()
	act := newActivity("redis-pause", m.stock, 2)
	e := newEnv(t, act)
	// One script call per buy, so that counting the calls Redis ran counts the requests that
	// reached it. With group admission a storm would hide inside the batches: at most two calls
	// per activity are in flight whatever the breaker does.
	e.storeOptions = "admit_batch 1"
	gw := e.startGateway("gateway")

	d := newDriver(t, act.id, gw)
	// Impatient buyers: they retry 100 ms after a 503 whatever Retry-After says, the storm a
	// breaker exists to keep away from Redis.
	d.retryCap = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	wait := d.start(ctx, makeBuyers(t, "pause", m.users, 1), m.conc)
	pid := e.redisPID()

	for round := 1; round <= m.rounds; round++ {
		// Mid-sale, and a clean start of the window: no call in flight, Redis idle.
		n := int64(round) * m.stock / int64(m.rounds+2)
		d.waitHeld(t, d.holdAt(n), n)
		d.gate.quiet()
		scripts0 := e.scriptCalls()
		queued0 := e.queued()
		e.redis.Pause()
		waitFor(t, "redis-server stopped", 10*time.Second, func() bool { return proc.Stopped(pid) })
		paused := time.Now()
		stop := make(chan struct{})
		opened := gw.watchBreaker(stop)
		d.gate.release()

		time.Sleep(m.pause)
		d.gate.hold() // no new call from here: what the window sent is all Redis will get
		e.redis.Resume()
		resumed := time.Now()
		d.gate.quiet() // every call of the window has its answer
		close(stop)
		scripts1 := e.settledScriptCalls()
		queued1 := e.queued()

		window := d.within(paused, time.Now())
		buys := count(window, func(a attempt) bool { return a.call == "buy" })
		pausedBuys := 0
		for _, a := range window {
			if a.call != "buy" || !a.got.Before(resumed) {
				continue
			}
			pausedBuys++
			if a.status != http.StatusServiceUnavailable || a.code != "busy" {
				t.Errorf("round %d: answered while redis-server was stopped: %s", round, a)
			}
		}
		if pausedBuys == 0 {
			t.Fatalf("round %d: no buy was answered while redis-server was stopped: the pause was not exercised", round)
		}
		if !<-opened {
			t.Errorf("round %d: the breaker never opened while redis-server was stopped", round)
		}

		// No retry storm: each call that reached Redis came from a request in flight when the
		// breaker closed its door (at most conc, the buyers), or from a half-open trial (one per
		// open timeout), each sent at most 1+retries times.
		ran := scripts1 - scripts0
		trials := int64(resumed.Sub(paused)/breakerOpenTimeout) + 1
		bound := (1 + gatewayCommandRetries) * (int64(m.conc) + trials)
		if ran > bound {
			t.Errorf("round %d: retry storm: Redis ran %d admission scripts for the pause window, bound %d (%d buyers, %d trials, %d retry)",
				round, ran, bound, m.conc, trials, gatewayCommandRetries)
		}
		if ran >= int64(buys) {
			t.Errorf("round %d: Redis ran %d admission scripts for %d buys: the breaker kept nothing away", round, ran, buys)
		}
		// Wins the queue gained from the window's calls that no buyer was told of (yet): their
		// buyers got 503 and get the 202 back by retrying with the same key (checked by verify).
		told := count(window, func(a attempt) bool { return a.call == "buy" && a.status == http.StatusAccepted })
		var slowest time.Duration
		for _, a := range window {
			slowest = max(slowest, a.got.Sub(a.sent))
		}
		d.gate.release()

		var recovery time.Duration
		waitFor(t, "a 202 after the pause", time.Minute, func() bool {
			for _, a := range d.snapshot() {
				if a.call == "buy" && a.status == http.StatusAccepted && a.sent.After(resumed) {
					recovery = a.got.Sub(resumed)
					return true
				}
			}
			return false
		})
		t.Logf("round %d: stopped %s; %d buys sent in the window (%d answered while stopped, all 503 busy; slowest answer %s); "+
			"Redis ran %d admission scripts for them (bound %d); queue +%d with %d told by 202 in the window; first 202 %s after SIGCONT",
			round, resumed.Sub(paused).Round(time.Millisecond), buys, pausedBuys, slowest.Round(time.Millisecond),
			ran, bound, queued1-queued0, told, recovery.Round(time.Millisecond))
	}
	wait()
	t.Logf("answers: %s", summary(d.snapshot()))
	e.startBackend("backend", 30*time.Second)
	e.verify(d)
}
