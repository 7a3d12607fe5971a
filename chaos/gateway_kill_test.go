package chaos

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestGatewayKilled is scenario 5: two gateways share one Redis; one is killed with SIGKILL
// mid-sale. Buyers that lose their answer retry on the other gateway with the same
// Idempotency-Key; a win whose answer died with the gateway is answered again there. Reconcile
// passes, every 202 is one order, nothing is oversold. The full run restarts the killed gateway
// and kills the other one, and so on. A replay of a win answered by a dead gateway is read from
// the buyer's one :users field, and several buyers' wins share one queue entry (reservations E-k).
func TestGatewayKilled(t *testing.T) {
	m := currentMode()
	id := "gateway-kill"
	act := newActivity(id, m.stock, 2)
	e := newEnv(t, act)
	gws := []*gateway{e.startGateway("gateway-1"), e.startGateway("gateway-2")}
	e.startBackend("backend", 30*time.Second)

	d := newDriver(t, act.id, gws...)
	d.retryCap = time.Second
	d.noAnswerOK = true // the killed gateway's buyers lose answers: that is the point
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	wait := d.start(ctx, makeBuyers(t, "gw", m.users, len(gws)), m.conc)

	for round := 1; round <= m.rounds; round++ {
		v := (round - 1) % 2
		victim, other := gws[v], gws[1-v]
		if other.exited() { // the previous round's victim comes back before this one goes
			other.restart()
		}
		// Mid-sale, with stock left for sure: the buyers stop at a known number of wins, a burst
		// of calls starts, and the kill meets them on their way.
		n := int64(round) * m.stock / int64(m.rounds+4)
		d.waitHeld(t, d.holdAt(n), n)
		d.burst(m.conc / 2)
		victim.kill()
		killed := time.Now()
		d.gate.release()

		// Wait until some buyer that lost an answer on the victim has finished on the other one.
		var moved, lostInFlight, winsReanswered int
		waitFor(t, "a buyer of the killed gateway finishing on the other", time.Minute, func() bool {
			moved, lostInFlight, winsReanswered = movedBuyers(d.snapshot(), v, killed)
			return moved > 0
		})
		if other.exited() {
			t.Fatalf("%s exited", other.name)
		}
		t.Logf("round %d: %s killed; %d calls were in flight on it and lost their answer; %d buyers finished on %s so far, %d of them winners admitted before the kill and answered again there",
			round, victim.name, lostInFlight, moved, other.name, winsReanswered)
	}
	wait()
	t.Logf("answers: %s", summary(d.snapshot()))
	// The sale made entries of several wins, or the queue's multi-win entries went untested.
	es := e.entriesAfter("-")
	var wins, multi int64
	for _, x := range es {
		wins += x.wins
		if x.wins >= 2 {
			multi++
		}
	}
	if multi == 0 {
		t.Fatalf("the sale's %d wins are %d entries of one win each: multi-win entries untested", wins, len(es))
	}
	t.Logf("the sale's %d wins are %d entries, %d of them with 2+ wins", wins, len(es), multi)
	e.verify(d)
}

// movedBuyers looks at the buyers that got no answer from gateway v after killed (minus a
// moment): how many of them were answered by another gateway since, how many calls were in flight
// at the kill, and how many of the answers are wins admitted before the kill (the queue entry's
// time, which is the reservation id), i.e. answers that died with the gateway and came back on the
// other one.
func movedBuyers(as []attempt, v int, killed time.Time) (moved, inFlight, reanswered int) {
	lost := map[userKey]bool{}
	for _, a := range as {
		if a.gateway == v && a.status == 0 && a.got.After(killed.Add(-time.Second)) {
			lost[userKey{a.user, a.key}] = true
			if a.sent.Before(killed) {
				inFlight++
			}
		}
	}
	answered, won := map[userKey]bool{}, map[userKey]bool{}
	for _, a := range as {
		k := userKey{a.user, a.key}
		if !lost[k] || a.gateway == v || a.status == 0 || a.status == http.StatusServiceUnavailable {
			continue
		}
		answered[k] = true
		if at := reservationTime(a.reservation); a.status == http.StatusAccepted && !at.IsZero() && at.Before(killed) {
			won[k] = true
		}
	}
	return len(answered), inFlight, len(won)
}

// reservationTime is when Redis queued a win: a reservation id is its stream entry id, whose
// first part is Redis's clock in milliseconds.
func reservationTime(id string) time.Time {
	ms, err := strconv.ParseInt(strings.SplitN(id, "-", 2)[0], 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}
