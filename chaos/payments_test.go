package chaos

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

// paySale runs the sale of a payment scenario to its end (every buyer answered) on gws and
// returns the driver and the buyers.
func paySale(t *testing.T, e *env, prefix string, users int, gws ...*gateway) (*driver, []buyer) {
	t.Helper()
	d := newDriver(t, e.act.id, gws...)
	bs := makeBuyers(t, prefix, users, len(gws))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	d.start(ctx, bs, e.mode.conc)()
	if w := len(d.wins()); int64(w) != e.act.stock {
		t.Fatalf("the sale made %d wins of a stock of %d", w, e.act.stock)
	}
	return d, bs
}

// TestPaymentGatewayKilled is scenario 12: the winners pay through the real stripe provider
// (the ledger behind it) while the gateway that runs the embedded order backend is SIGKILLed
// again and again, each kill aimed between a charge and its mark-paid: the ledger has taken the
// money and the process dies before the answer reaches it. A buyer whose answer died retries with
// the same attempt (the same idempotency key: the ledger replays the charge, nothing is taken
// twice), or has left (one in three) and the restarted gateway's sweeper settles the attempt with
// the provider's Lookup. At the end every charge pays its order, nothing is charged twice, no item
// is sold twice, and reconcile with money is clean.
func TestPaymentGatewayKilled(t *testing.T) {
	m := currentMode()
	kills := 3
	if m.full {
		kills = 8
	}
	act := newActivity("pay-gateway-kill", m.stock, 2)
	e := newEnv(t, act)
	l := startLedger(t)
	cfg := payConfig{payWithin: 15 * time.Minute, settleAfter: 3 * time.Second}
	gw := e.startPayGateway("gateway", l, cfg)
	d, bs := paySale(t, e, "pk", m.users, gw)

	// Aimed kills: the ledger kills the gateway right after taking the money of the armed charge.
	var (
		armed     atomic.Bool
		killedMu  sync.Mutex
		killedFor []string
		killed    = make(chan struct{}, 1)
	)
	// Every charge takes the provider 100 ms to answer once the money is taken, and an aimed kill
	// waits 80 ms after its charge: the charges taken just before it are caught too.
	l.setBehaviour(func(string) chargeBehaviour { return chargeBehaviour{answerDelay: 100 * time.Millisecond} })
	l.setAfterCharge(func(key string) {
		if armed.CompareAndSwap(true, false) {
			time.Sleep(80 * time.Millisecond)
			gw.kill()
			killedMu.Lock()
			killedFor = append(killedFor, key)
			killedMu.Unlock()
			killed <- struct{}{}
		}
	})
	p := newPayers(t, act.id, gw)
	pms := winners(d, bs)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	done := make(chan struct{})
	began := time.Now()
	// The payers are spread over a few seconds so that the kills meet them in full flow.
	spread := time.Duration(kills+2) * time.Second
	go func() {
		defer close(done)
		p.payAll(ctx, pms, 16, func(i int, _ *payment) time.Time {
			return began.Add(spread * time.Duration(i) / time.Duration(len(pms)))
		}, func(i int) bool { return i%2 != 0 })
	}()
	restarts := make([]time.Duration, 0, kills)
	for k := 1; k <= kills; k++ {
		target := k * len(pms) / (kills + 1)
		waitFor(t, fmt.Sprintf("%d charges before kill %d", target, k), time.Minute, func() bool {
			l.mu.Lock()
			defer l.mu.Unlock()
			return l.creates >= target
		})
		armed.Store(true)
		select {
		case <-killed:
		case <-time.After(time.Minute):
			t.Fatalf("kill %d: no charge came to aim it at", k)
		}
		at := time.Now()
		gw.restart()
		restarts = append(restarts, time.Since(at).Round(time.Millisecond))
	}
	<-done
	killedMu.Lock()
	t.Logf("%d kills, each right after the ledger took the money of %v; restarts took %v", kills, killedFor, restarts)
	killedMu.Unlock()
	out := p.outcomes()
	lost := 0
	for _, c := range p.calls() {
		if c.status == 0 && c.err != "connection refused" {
			lost++
		}
	}
	t.Logf("payments: %v; pay calls %d, of which %d lost their answer in a kill; ledger %s", out, len(p.calls()), lost, l.counts())
	if out["paid"]+out["gone"] != len(pms) {
		t.Errorf("outcomes %v: every buyer pays (paid) or leaves after a lost answer (gone)", out)
	}
	if lost < kills {
		t.Errorf("%d pay calls lost their answer in %d kills aimed between a charge and its answer", lost, kills)
	}
	rep := e.moneyEnd(d, l)
	// The window is 15 minutes: every charge pays its order, none is refunded, and every buyer
	// whose charge was taken before the kill (even one that left) has a paid order.
	if rep.Refunds != 0 || rep.Charges != rep.Paid {
		t.Errorf("charges %d, refunds %d, paid orders %d: want one charge per paid order and no refund", rep.Charges, rep.Refunds, rep.Paid)
	}
	if rep.Paid < int64(out["paid"]) {
		t.Errorf("%d orders paid, %d buyers were told paid", rep.Paid, out["paid"])
	}
	lt := l.totals()
	killedMu.Lock()
	for _, key := range killedFor {
		if !lt.SucceededKeys[key] {
			t.Errorf("the charge %s the gateway was killed after is not in the ledger", key)
		}
	}
	killedMu.Unlock()
	// The buyers who left after a lost answer whose money the ledger had taken: only the
	// sweeper's Lookup can have paid their orders (reconcile's paid_without_charge and the
	// ledger's books above hold them to one charge each).
	orders, err := e.orders().Orders(context.Background(), act.id)
	if err != nil {
		t.Fatal(err)
	}
	paid := map[string]bool{}
	for _, o := range orders {
		paid[o.ID] = o.Status == orderbackend.StatusPaid
	}
	bySweeper := 0
	p.mu.Lock()
	for _, pm := range p.payments {
		if pm.outcome == "gone" && lt.ChargesPerOrder[pm.order] > 0 {
			bySweeper++
			if !paid[pm.order] {
				t.Errorf("%s left after its charge was taken; its order %s is not paid", pm.user, pm.order)
			}
		}
	}
	p.mu.Unlock()
	t.Logf("%d buyers left after a lost answer with their money taken: their orders paid by the sweeper's lookup", bySweeper)
}

// longOutage reports whether the provider outage lasts 30 s: in the full run, or with
// SECKILL_LONG_OUTAGE=1.
func longOutage(m mode) bool { return m.full || os.Getenv("SECKILL_LONG_OUTAGE") == "1" }

// TestPaymentProviderDown is scenario 13: while the winners pay, the provider (the ledger)
// becomes unreachable — its port closed, its open connections cut — for 30 s (3 s in the short
// run). The pay calls of the outage are answered 503 busy with Retry-After (never 200, never a
// decline: the outcome is unknown, the attempt stays open); the buyers retry with the same
// attempt, and once the provider is back they are paid. The sweeper settles the attempts whose
// connection was cut mid-charge. Reconcile with money is clean; the ledger agrees.
func TestPaymentProviderDown(t *testing.T) {
	m := currentMode()
	outage := 3 * time.Second
	if longOutage(m) {
		outage = 30 * time.Second
	}
	act := newActivity("pay-provider-down", m.stock, 2)
	e := newEnv(t, act)
	l := startLedger(t)
	gw := e.startPayGateway("gateway", l, payConfig{payWithin: 15 * time.Minute, settleAfter: 3 * time.Second})
	d, bs := paySale(t, e, "pd", m.users, gw)

	p := newPayers(t, act.id, gw)
	pms := winners(d, bs)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	done := make(chan struct{})
	began := time.Now()
	spread := outage + 4*time.Second
	go func() {
		defer close(done)
		p.payAll(ctx, pms, m.conc, func(i int, _ *payment) time.Time {
			return began.Add(spread * time.Duration(i) / time.Duration(len(pms)))
		}, nil)
	}()
	waitFor(t, "a fifth of the charges", time.Minute, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.creates >= len(pms)/5
	})
	l.setDown(true)
	down := time.Now()
	time.Sleep(outage)
	l.setDown(false)
	up := time.Now()
	<-done

	var during, busy, firstAfter = 0, 0, time.Duration(-1)
	for _, c := range p.calls() {
		if c.sent.After(down.Add(100*time.Millisecond)) && c.got.Before(up) && c.status != 0 {
			during++
			if c.status == http.StatusServiceUnavailable && c.code == "busy" && c.retryAfter != "" {
				busy++
			} else {
				t.Errorf("a pay call during the outage was answered %d %q (Retry-After %q): want 503 busy", c.status, c.code, c.retryAfter)
			}
		}
		if c.status == http.StatusOK && c.got.After(up) && (firstAfter < 0 || c.got.Sub(up) < firstAfter) {
			firstAfter = c.got.Sub(up)
		}
	}
	if during == 0 {
		t.Fatalf("no pay call was answered during the %s outage: the outage was not exercised", outage)
	}
	if firstAfter < 0 || firstAfter > 10*time.Second {
		t.Errorf("first payment after the provider came back: %s (want within 10 s)", firstAfter)
	}
	out := p.outcomes()
	t.Logf("provider down %s: %d pay calls answered during it, all 503 busy with Retry-After; first paid %s after it came back; payments %v",
		outage, during, firstAfter.Round(time.Millisecond), out)
	if out["paid"] != len(pms) {
		t.Errorf("outcomes %v: every buyer is paid once the provider is back", out)
	}
	rep := e.moneyEnd(d, l)
	if rep.Refunds != 0 || rep.Charges != rep.Paid || rep.Paid != int64(len(pms)) {
		t.Errorf("charges %d, refunds %d, paid orders %d of %d", rep.Charges, rep.Refunds, rep.Paid, len(pms))
	}
}

// Scenario 14's groups of payers (by their index modulo 4).
const (
	lateRetried   = iota // answer held past the charge timeout, retried in the window: paid
	lateAnswered         // answered after the window closed: refunded by the pay call
	lateTimedOut         // answer held past the timeout and the window: refunded by the sweeper
	lateProcessed        // processing until after the order was swept: refunded by the sweeper
)

// TestPaymentLateSuccess is scenario 14: the provider takes the money but its success comes
// late. Two gateways run the embedded order backend on one database (both sweepers settle and
// refund), pay_within 12 s, settle_after 6 s (a charge call is bounded by 3 s). The winners are
// four groups: (0) the answer is held 4 s, past the charge timeout: 503, the retry gets the
// replayed success in the window: paid; (1) paying 1 s before the window closes, the answer comes
// 2 s later: the success after the window is refunded at once, 409 expired; (2) paying 2 s
// before, the answer held 4 s: 503, the retry 409, the order swept, and the sweeper's Lookup finds
// the success and refunds it; (3) the PaymentIntent stays processing 3 s (202 pending), the order
// is swept, then it succeeds: the sweeper refunds it. Each charge of groups 1–3 is refunded
// exactly once (the ledger counts), and reconcile shows the charges and refunds.
func TestPaymentLateSuccess(t *testing.T) {
	m := currentMode()
	n := int64(40)
	if m.full {
		n = 200
	}
	act := newActivity("pay-late", n, 2)
	e := newEnv(t, act)
	l := startLedger(t)
	cfg := payConfig{payWithin: 12 * time.Second, settleAfter: 6 * time.Second}
	gws := []*gateway{e.startPayGateway("gateway-1", l, cfg), e.startPayGateway("gateway-2", l, cfg)}
	d, bs := paySale(t, e, "pl", int(2*n), gws...)

	pms := winners(d, bs)
	group := map[string]int{} // order → group
	var gmu sync.Mutex
	l.setBehaviour(func(order string) chargeBehaviour {
		gmu.Lock()
		g, ok := group[order]
		gmu.Unlock()
		switch {
		case !ok:
			t.Errorf("ledger: a charge of order %q, no winner's", order)
		case g == lateRetried, g == lateTimedOut:
			return chargeBehaviour{answerDelay: 4 * time.Second}
		case g == lateAnswered:
			return chargeBehaviour{answerDelay: 2 * time.Second}
		case g == lateProcessed:
			return chargeBehaviour{processing: 3 * time.Second}
		}
		return chargeBehaviour{}
	})
	p := newPayers(t, act.id, gws...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	before := [...]time.Duration{lateRetried: 8 * time.Second, lateAnswered: time.Second, lateTimedOut: 2 * time.Second, lateProcessed: time.Second}
	p.payAll(ctx, pms, len(pms), func(i int, pm *payment) time.Time {
		gmu.Lock()
		group[pm.order] = i % 4
		gmu.Unlock()
		if time.Until(pm.payBefore) < before[i%4]+500*time.Millisecond {
			t.Errorf("the order of %s came %s before its window closed: too late for the scenario", pm.user, time.Until(pm.payBefore))
		}
		return pm.payBefore.Add(-before[i%4])
	}, nil)

	want := [...]string{lateRetried: "paid", lateAnswered: "expired", lateTimedOut: "expired", lateProcessed: "pending"}
	var perGroup [4]int
	p.mu.Lock()
	for _, pm := range p.payments {
		g := group[pm.order]
		perGroup[g]++
		if pm.outcome != want[g] {
			t.Errorf("group %d payer %s: %s after %d calls, want %s", g, pm.user, pm.outcome, len(pm.calls), want[g])
		}
		if g == lateRetried || g == lateTimedOut {
			if len(pm.calls) < 2 || pm.calls[0].status != http.StatusServiceUnavailable {
				t.Errorf("group %d payer %s: first call %+v: want 503 busy (the answer held past the charge timeout), then a retry", g, pm.user, pm.calls[0])
			}
		}
	}
	p.mu.Unlock()
	t.Logf("payers per group (retried in window, answered after window, timed out past window, processing): %v; outcomes %v", perGroup, p.outcomes())

	rep := e.moneyEnd(d, l)
	refunded := int64(perGroup[lateAnswered] + perGroup[lateTimedOut] + perGroup[lateProcessed])
	if rep.Charges != int64(len(pms)) || rep.Refunds != refunded || rep.Paid != int64(perGroup[lateRetried]) {
		t.Errorf("reconcile: charges %d, refunds %d, paid %d; want %d, %d, %d", rep.Charges, rep.Refunds, rep.Paid, len(pms), refunded, perGroup[lateRetried])
	}
	if rep.Cancelled != refunded {
		t.Errorf("%d orders cancelled, want %d (the late ones)", rep.Cancelled, refunded)
	}
}
