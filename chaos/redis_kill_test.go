package chaos

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// TestRedisKilled is scenario 1: redis-server (AOF, appendfsync everysec) is killed with SIGKILL
// mid-sale and restarted. While it is down every buy is 503 busy with Retry-After and nothing is
// admitted, the breaker is open; after the restart the same gateway admits again on its own; every
// win acknowledged before the kill survives it (the AOF is written before the reply); reconcile
// passes and every 202 is one order. The wins acknowledged before the kill are each win k of an
// entry E in the AOF-restored stream, and the sale's entries carry several wins (group admission),
// so the restart and the consumer's reads after it meet multi-win entries.
func TestRedisKilled(t *testing.T) {
	m := currentMode()
	id := "redis-kill"
	act := newActivity(id, m.stock, 2)
	e := newEnv(t, act)
	gw := e.startGateway("gateway")
	e.startBackend("backend", 30*time.Second)

	d := newDriver(t, act.id, gw)
	d.retryCap = time.Second // patient buyers: they wait the Retry-After they are given
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	wait := d.start(ctx, makeBuyers(t, "kill", m.users, 1), m.conc)

	for round := 1; round <= m.rounds; round++ {
		// Mid-sale, with stock left for sure: the buyers stop at a known number of wins, a burst
		// of calls starts, and the kill meets them on their way.
		n := int64(round) * m.stock / int64(m.rounds+4)
		d.waitHeld(t, d.holdAt(n), n)
		d.burst(m.conc / 2)
		killing := time.Now()
		e.redis.Kill() // returns once the process is gone
		killed := time.Now()
		// Every 202 received by now was acknowledged by a server that is dead now.
		acked := d.wins()
		d.gate.release()
		stop := make(chan struct{})
		opened := gw.watchBreaker(stop)
		time.Sleep(m.down)
		close(stop)
		restarting := time.Now()
		e.redis.Restart()
		restarted := time.Now()
		queued, told := e.queued(), d.won.Load()

		// While it was down: buys were sent, and every one was 503 busy with Retry-After.
		down := d.within(killed, restarting)
		buys := count(down, func(a attempt) bool { return a.call == "buy" })
		busy := count(down, func(a attempt) bool {
			return a.call == "buy" && a.status == http.StatusServiceUnavailable && a.code == "busy" && a.retryAfter != ""
		})
		if buys == 0 {
			t.Fatalf("round %d: no buy was sent while redis-server was down: the outage was not exercised", round)
		}
		if busy != buys {
			for _, a := range down {
				if a.call == "buy" && a.status != http.StatusServiceUnavailable {
					t.Errorf("round %d: while redis-server was down: %s", round, a)
				}
			}
			t.Errorf("round %d: %d of %d buys while redis-server was down were 503 busy with Retry-After", round, busy, buys)
		}
		if !<-opened {
			t.Errorf("round %d: the breaker was never seen open while redis-server was down", round)
		}

		// Nothing acknowledged was lost with the process.
		if missing := e.missingFromStream(acked); len(missing) > 0 {
			t.Errorf("round %d: %d of %d wins acknowledged before SIGKILL are not in the queue after the restart: %v",
				round, len(missing), len(acked), missing)
		}

		inFlight := count(d.snapshot(), func(a attempt) bool {
			return a.call == "buy" && a.sent.Before(killing) && a.got.After(killed)
		})

		// The same gateway admits again on its own.
		var recovery time.Duration
		waitFor(t, "a 202 from the gateway after the restart", time.Minute, func() bool {
			for _, a := range d.snapshot() {
				if a.call == "buy" && a.status == http.StatusAccepted && !a.sent.Before(restarted) {
					recovery = a.got.Sub(restarted)
					return true
				}
			}
			return false
		})
		t.Logf("round %d: %d buys in flight at the kill; redis-server down %s: %d buys, all 503 busy; %d wins acknowledged before the kill, all in the AOF; "+
			"queue after the restart %d (202s received %d); first 202 %s after the restart (restart took %s)",
			round, inFlight, restarting.Sub(killed).Round(time.Millisecond), buys, len(acked), queued, told,
			recovery.Round(time.Millisecond), restarted.Sub(restarting).Round(time.Millisecond))
	}
	wait()
	t.Logf("answers: %s", summary(d.snapshot()))
	if s, err := gw.breakerState(); err != nil || s != 0 {
		t.Errorf("breaker state at the end %d (%v), want 0 (closed)", s, err)
	}
	e.requireMultiWinEntries()
	e.verify(d)
}
