package chaos

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// TestPostgresStopped is scenario 4: PostgreSQL is stopped mid-sale (30 s in the full run, 5 s in
// the short one). The edge keeps admitting meanwhile — it never needs the database — and the wins
// wait in the queue; after PostgreSQL returns the backend drains the backlog by itself and
// reconcile passes.
func TestPostgresStopped(t *testing.T) {
	m := currentMode()
	act := newActivity("pg-outage", m.stock, 2)
	e := newEnv(t, act)
	gw := e.startGateway("gateway")
	b := e.startBackend("backend", 30*time.Second)

	d := newDriver(t, act.id, gw)
	d.retryCap = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// Before: a sixth of the buyers (half the stock), and the queue drained into orders.
	d.start(ctx, makeBuyers(t, "before", m.users/6, 1), m.conc)()
	waitFor(t, "the queue drained before the outage", time.Minute, func() bool {
		p, l, err := e.backlog()
		return err == nil && p+l == 0
	})
	queued0 := e.queued()

	e.pg.Stop()
	stopped := time.Now()
	// During: a third of the buyers, for the other half of the stock, with the database down.
	d.start(ctx, makeBuyers(t, "during", m.users/3, 1), m.conc)()
	during := d.within(stopped, time.Now())
	won := count(during, func(a attempt) bool { return a.call == "buy" && a.status == http.StatusAccepted })
	busy := count(during, func(a attempt) bool { return a.status == http.StatusServiceUnavailable })
	if won == 0 {
		t.Fatalf("no buy was admitted while PostgreSQL was down (%s)", summary(during))
	}
	if busy != 0 {
		t.Errorf("%d calls were 503 while only PostgreSQL was down: the edge must not need it", busy)
	}
	if rest := m.pgDown - time.Since(stopped); rest > 0 {
		time.Sleep(rest)
	}
	// The wins of the outage are all still queue work: none could become an order.
	pending, lag, err := e.backlog()
	if err != nil {
		t.Fatal(err)
	}
	if gained := e.queued() - queued0; pending+lag != gained {
		t.Errorf("backlog %d (%d pending + %d undelivered) at the end of the outage, want the %d wins it made",
			pending+lag, pending, lag, gained)
	}
	starting := time.Now()
	e.pg.Start()
	outage := starting.Sub(stopped)
	if b.exited() {
		t.Fatalf("the order backend exited during the outage")
	}
	waitFor(t, "the backlog drained after PostgreSQL returned", m.drain, func() bool {
		p, l, err := e.backlog()
		return err == nil && p+l == 0
	})
	drained := time.Since(starting)
	t.Logf("PostgreSQL down %s: %d wins admitted meanwhile (%s); backlog %d drained %s after the restart began",
		outage.Round(time.Millisecond), won, summary(during), pending+lag, drained.Round(time.Millisecond))

	// After: the rest of the buyers.
	d.start(ctx, makeBuyers(t, "after", m.users-m.users/6-m.users/3, 1), m.conc)()
	t.Logf("answers: %s", summary(d.snapshot()))
	e.verify(d)
}
