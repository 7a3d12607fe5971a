package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

// Scenario 15's groups of payers (by their index modulo 4).
const (
	notePaid     = iota // processing, then succeeded by notification in the window: paid
	noteRepaid          // processing, then failed or canceled by notification; the second attempt paid
	noteLate            // processing until the order was swept, then succeeded: refunded
	noteAnswered        // succeeded at once (200), then notified too: the notification changes nothing
	noteGroups
)

// delivery is one POST of a notification to a gateway's /orders/webhooks/stripe, as the sender saw it.
type delivery struct {
	event   string // the event id ("" for a body that is not an event)
	gateway int
	status  int // 0: no answer
	err     string
	cause   error  // why there was no answer
	code    string // the answer's code: stored, duplicate, ignored, or the refusal's
	payment string // payment_status in a 2xx answer
	order   string // order_status in a 2xx answer
	redone  int    // deliveries of it again after no answer or a 5xx, as Stripe does
	lost    bool   // a try was sent and got no answer (not a refused connection)
}

// notifier delivers Stripe's webhooks to the gateways, as Stripe does: signed with the
// endpoint's secret at the time of sending, and delivered again after no answer or a 5xx.
type notifier struct {
	t     *testing.T
	bases []string
	hc    *http.Client

	mu     sync.Mutex
	all    []delivery
	bodies map[string][]byte // event id → body, of the events delivered

	stormed atomic.Int64 // storm's answered deliveries, refusals not counted
}

func newNotifier(t *testing.T, gws ...*gateway) *notifier {
	bases, hc := gatewayClient(t, 256, 20*time.Second, gws)
	return &notifier{t: t, bases: bases, hc: hc, bodies: map[string][]byte{}}
}

// post sends body with header h to gateway gw once.
func (n *notifier) post(ctx context.Context, gw int, body []byte, h http.Header) delivery {
	d := delivery{gateway: gw}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.bases[gw]+"/orders/webhooks/stripe", bytes.NewReader(body))
	if err != nil {
		d.err = err.Error()
		return d
	}
	maps.Copy(req.Header, h)
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	res, err := n.hc.Do(req)
	if err != nil {
		d.err, d.cause = err.Error(), err
		return d
	}
	raw, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil {
		d.err = "reading the answer: " + err.Error()
		return d
	}
	var ans struct {
		Code          string `json:"code"`
		PaymentStatus string `json:"payment_status"`
		OrderStatus   string `json:"order_status"`
	}
	if err := json.Unmarshal(raw, &ans); err != nil {
		d.err = fmt.Sprintf("answer %d is not JSON: %q", res.StatusCode, raw)
	}
	d.status, d.code, d.payment, d.order = res.StatusCode, ans.Code, ans.PaymentStatus, ans.OrderStatus
	return d
}

// send delivers body (signed by sign at the moment of each try; nil: unsigned) to gateway gw
// until an answer that is not a 5xx, as Stripe does (again after 200 ms), and records it.
func (n *notifier) send(ctx context.Context, ev ledgerEvent, gw int, sign func([]byte) http.Header) delivery {
	var d delivery
	lost := false
	for tries := 0; ; tries++ {
		var h http.Header
		if sign != nil {
			h = sign(ev.Body)
		}
		d = n.post(ctx, gw, ev.Body, h)
		lost = lost || (d.status == 0 && !errors.Is(d.cause, syscall.ECONNREFUSED))
		d.event, d.redone, d.lost = ev.ID, tries, lost
		if (d.status != 0 && d.status < 500) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	n.mu.Lock()
	n.all = append(n.all, d)
	if ev.ID != "" {
		n.bodies[ev.ID] = ev.Body
	}
	n.mu.Unlock()
	return d
}

// signNow is a valid signature: the endpoint's secret, now.
func signNow(body []byte) http.Header { return stripeSignature(body, ledgerWebhookSecret, time.Now()) }

// storm delivers each event copies times, all at once from as many goroutines, the copies spread
// over the gateways and shuffled, and returns the answers.
func (n *notifier) storm(ctx context.Context, copies int, evs ...ledgerEvent) []delivery {
	type job struct {
		ev ledgerEvent
		gw int
	}
	var jobs []job
	for _, ev := range evs {
		for c := range copies {
			jobs = append(jobs, job{ev, (c + rand.IntN(len(n.bases))) % len(n.bases)})
		}
	}
	rand.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	out := make([]delivery, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = n.send(ctx, j.ev, j.gw, signNow)
			n.stormed.Add(1)
		}()
	}
	wg.Wait()
	return out
}

// body is the body of a delivered event.
func (n *notifier) body(event string) []byte {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.bodies[event]
}

// deliveries is every delivery made, in no order.
func (n *notifier) deliveries() []delivery {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]delivery(nil), n.all...)
}

// refusal is a notification the gateways must refuse or ignore, and the answer it must get.
type refusal struct {
	kind   string
	ev     ledgerEvent
	sign   func([]byte) http.Header
	status int
	code   string
}

// refusals are the bad and foreign notifications about the started attempts with payment keys
// keys (PaymentIntents processing in the ledger): each, were it taken, would settle a real
// attempt. tolerance is the gateways' webhook_tolerance.
func refusals(t *testing.T, l *ledger, keys []string, tolerance time.Duration) []refusal {
	t.Helper()
	var out []refusal
	for i, key := range keys {
		pi := l.intentOf(key)
		obj := l.object(pi)
		if obj == nil {
			t.Fatalf("the ledger has no PaymentIntent of payment %s", key)
		}
		paid := maps.Clone(obj)
		paid["status"], paid["amount_received"] = "succeeded", paid["amount"]
		success := l.forged("payment_intent.succeeded", paid)
		order := key[:strings.LastIndexByte(key, '-')]
		unknownOrder := maps.Clone(paid)
		unknownOrder["id"] = fmt.Sprintf("pi_chaosunknown%04d", i)
		unknownOrder["metadata"] = map[string]string{"seckill_key": fmt.Sprintf("o-chaos-unknown-%d-1", i), "seckill_order": fmt.Sprintf("o-chaos-unknown-%d", i)}
		unknownAttempt := maps.Clone(paid)
		unknownAttempt["metadata"] = map[string]string{"seckill_key": order + "-9", "seckill_order": order}
		noID := maps.Clone(paid)
		delete(noID, "id")
		foreignPI := maps.Clone(paid)
		foreignPI["id"] = fmt.Sprintf("pi_chaosother%04d", i)
		foreignPI["metadata"] = map[string]string{"shop": "another integration"}
		processing, err := l.event(pi, "payment_intent.processing")
		if err != nil {
			t.Fatal(err)
		}
		charge := l.forged("charge.succeeded", map[string]any{"id": fmt.Sprintf("ch_chaos%04d", i), "object": "charge",
			"amount": paid["amount"], "currency": paid["currency"], "payment_intent": pi, "status": "succeeded"})
		malformed := ledgerEvent{ID: "", Body: []byte(`{"id": "evt_broken", "object": "event", "type": "payment_intent.succeeded", "data": {`)}
		out = append(out,
			refusal{"bad signature", success, func(b []byte) http.Header {
				return stripeSignature(b, "whsec_not_the_endpoints", time.Now())
			}, 400, "bad_signature"},
			refusal{"signed longer ago than the tolerance", success, func(b []byte) http.Header {
				return stripeSignature(b, ledgerWebhookSecret, time.Now().Add(-tolerance-time.Minute))
			}, 400, "bad_signature"},
			refusal{"unsigned", success, nil, 400, "bad_signature"},
			refusal{"signature of another body", success, func([]byte) http.Header { return signNow(processing.Body) }, 400, "bad_signature"},
			refusal{"unknown order", l.forged("payment_intent.succeeded", unknownOrder), signNow, 404, "unknown_payment"},
			refusal{"unknown attempt of a real order", l.forged("payment_intent.succeeded", unknownAttempt), signNow, 404, "unknown_payment"},
			refusal{"malformed body", malformed, signNow, 400, "bad_notification"},
			refusal{"a PaymentIntent event without a PaymentIntent id", l.forged("payment_intent.succeeded", noID), signNow, 400, "bad_notification"},
			refusal{"foreign type payment_intent.processing", processing, signNow, 200, "ignored"},
			refusal{"foreign type charge.succeeded", charge, signNow, 200, "ignored"},
			refusal{"another integration's PaymentIntent", l.forged("payment_intent.succeeded", foreignPI), signNow, 200, "ignored"},
		)
	}
	return out
}

// sendRefusals delivers every refusal copies times at once, spread over the gateways, and
// checks each answer.
func (n *notifier) sendRefusals(ctx context.Context, rs []refusal, copies int) int {
	var wg sync.WaitGroup
	for i, r := range rs {
		for c := range copies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := n.send(ctx, r.ev, (i+c)%len(n.bases), r.sign)
				if d.status != r.status || d.code != r.code {
					n.t.Errorf("notification %q (%s): %d %q %s, want %d %s", r.kind, r.ev.ID, d.status, d.code, d.err, r.status, r.code)
				}
			}()
		}
	}
	wg.Wait()
	return len(rs) * copies
}

// moneyState is what a notification could change: every attempt and order of the activity, the
// stored events, and reconcile's counts.
type moneyState struct {
	payments map[string]string // key → status, provider ref
	orders   map[string]string // id → status, payment
	events   int64
	report   orderbackend.Report
}

func (e *env) moneyState() moneyState {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	repo := e.orders()
	s := moneyState{payments: map[string]string{}, orders: map[string]string{}}
	ps, err := repo.Payments(ctx, e.act.id)
	if err != nil {
		e.t.Fatalf("read payments: %v", err)
	}
	for _, p := range ps {
		s.payments[p.Key] = string(p.Status) + " " + p.ProviderRef
	}
	orders, err := repo.Orders(ctx, e.act.id)
	if err != nil {
		e.t.Fatalf("read orders: %v", err)
	}
	for _, o := range orders {
		s.orders[o.ID] = string(o.Status) + " " + o.PaymentRef
	}
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		e.t.Fatalf("connect to the order database: %v", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM payment_events`).Scan(&s.events); err != nil {
		e.t.Fatalf("count payment events: %v", err)
	}
	if s.report, err = orderbackend.Reconcile(ctx, e.store, repo, e.act.id); err != nil {
		e.t.Fatalf("reconcile: %v", err)
	}
	// What relaying the outbox moves is not a notification's doing.
	s.report.OutboxBacklog, s.report.Violations = 0, nil
	return s
}

// unchanged fails the test if anything a notification could change differs between a and b.
func (e *env) unchanged(what string, a, b moneyState) {
	e.t.Helper()
	if !reflect.DeepEqual(a.payments, b.payments) || !reflect.DeepEqual(a.orders, b.orders) {
		e.t.Errorf("%s changed the payments or orders:\nbefore %v %v\nafter  %v %v", what, a.payments, a.orders, b.payments, b.orders)
	}
	if a.events != b.events {
		e.t.Errorf("%s stored events: %d before, %d after", what, a.events, b.events)
	}
	if !reflect.DeepEqual(a.report, b.report) {
		e.t.Errorf("%s changed reconcile:\nbefore %+v\nafter  %+v", what, a.report, b.report)
	}
}

// TestPaymentNotifications is scenario 15: the outcome of a payment comes by Stripe's signed
// notifications, replayed, out of order, concurrently, on two gateways running the embedded
// order backend on one database; bad notifications are refused and change nothing. The ledger
// keeps the PaymentIntents of groups 0–2 processing (the buyer gets 202 payment_pending), then
// finishes them and delivers their events, each several times at once over both gateways:
// (0) succeeded in the window: paid; (1) payment_failed or canceled, then the buyer's second
// attempt is paid, and the first attempt's events (and a later canceled) come again after it:
// the order stays paid; (2) succeeded once the order was swept: refunded exactly once;
// (3) succeeded at once (200), its notification changes nothing. Gateway 2 is SIGKILLed and
// restarted while the storm of groups 0, 1 and 3 is in flight; a delivery without an answer is
// delivered again, as Stripe does. Forged, old, unsigned,
// malformed, unknown and foreign notifications are sent on a quiet database (nothing may
// change), then alongside the storm, and every stored event is replayed at the end (nothing
// may change). Then the money end.
func TestPaymentNotifications(t *testing.T) {
	m := currentMode()
	n, copies, refusalKeys := int64(40), 3, 8
	if m.full {
		n, copies, refusalKeys = 200, 5, 24
	}
	act := newActivity("pay-notify", n, 2)
	e := newEnv(t, act)
	l := startLedger(t)
	cfg := payConfig{payWithin: 20 * time.Second, settleAfter: 4 * time.Second,
		webhookSecret: ledgerWebhookSecret, webhookTolerance: time.Minute}
	gws := []*gateway{e.startPayGateway("gateway-1", l, cfg), e.startPayGateway("gateway-2", l, cfg)}
	start := time.Now()
	var phases []string
	phase := func(name string) {
		phases = append(phases, fmt.Sprintf("%s %s", name, time.Since(start).Round(100*time.Millisecond)))
	}
	d, bs := paySale(t, e, "pn", int(2*n), gws...)
	phase("sale")
	pms := winners(d, bs)

	// The ledger holds the first charge of groups 0–2 processing until the test finishes it.
	var gmu sync.Mutex
	group := map[string]int{} // order → group
	charges := map[string]int{}
	l.setBehaviour(func(order string) chargeBehaviour {
		gmu.Lock()
		defer gmu.Unlock()
		g, ok := group[order]
		charges[order]++
		if !ok {
			t.Errorf("ledger: a charge of order %q, no winner's", order)
		}
		if g != noteAnswered && charges[order] == 1 {
			return chargeBehaviour{processing: time.Hour}
		}
		return chargeBehaviour{}
	})
	p := newPayers(t, act.id, gws...)
	nt := newNotifier(t, gws...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	began := time.Now()
	p.payAll(ctx, pms, len(pms), func(i int, pm *payment) time.Time {
		gmu.Lock()
		group[pm.order] = i % noteGroups
		gmu.Unlock()
		if left := time.Until(pm.payBefore); left < 12*time.Second {
			t.Errorf("the order of %s came %s before its window closed: too late for the scenario", pm.user, left)
		}
		return time.Now()
	}, nil)
	byGroup := make([][]*payment, noteGroups)
	p.mu.Lock()
	for _, pm := range p.payments {
		g := group[pm.order]
		byGroup[g] = append(byGroup[g], pm)
		want := "pending"
		if g == noteAnswered {
			want = "paid"
		}
		if pm.outcome != want {
			t.Errorf("group %d payer %s: %s, want %s", g, pm.user, pm.outcome, want)
		}
	}
	p.mu.Unlock()
	if t.Failed() {
		t.FailNow()
	}
	firstPaid := time.Since(began)
	phase("first pay calls")

	// Quiet: nothing but the sweeper (which finds the held PaymentIntents processing) runs.
	var started []string
	for _, g := range []int{notePaid, noteRepaid, noteLate} {
		for _, pm := range byGroup[g] {
			started = append(started, pm.order+"-1")
		}
	}
	rs := refusals(t, l, started[:min(len(started), refusalKeys)], cfg.webhookTolerance)
	before := e.moneyState()
	refused := nt.sendRefusals(ctx, rs, 2)
	e.unchanged("the bad and foreign notifications on a quiet database", before, e.moneyState())
	phase("quiet refusals")

	// The storm: groups 0, 1 and 3 at once, each winner in its own goroutine, with a second
	// round of the refusals alongside; gateway 2 is SIGKILLed once the first answers came.
	stormFrom := nt.stormed.Load()
	stormBegan := time.Now()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		refused += nt.sendRefusals(ctx, rs, 1)
	}()
	expectOrder := func(what string, ds []delivery, order string) {
		for _, dl := range ds {
			if dl.status != http.StatusOK || (dl.code != "stored" && dl.code != "duplicate") || dl.order != order {
				t.Errorf("%s: event %s on gateway %d: %d %s order %q %s, want 200 stored or duplicate, order %s",
					what, dl.event, dl.gateway+1, dl.status, dl.code, dl.order, dl.err, order)
			}
		}
	}
	// succeed lets the PaymentIntent of an order's first attempt succeed and delivers its events.
	succeed := func(order string) ([]delivery, bool) {
		pi := l.intentOf(order + "-1")
		if err := l.finish(pi, "succeeded"); err != nil {
			t.Error(err)
			return nil, false
		}
		return nt.storm(ctx, copies, l.takeEvents(pi)...), true
	}
	for _, pm := range byGroup[notePaid] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ds, ok := succeed(pm.order)
			if !ok {
				return
			}
			expectOrder("group 0 "+pm.user, ds, string(orderbackend.StatusPaid))
		}()
	}
	for i, pm := range byGroup[noteRepaid] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pi1 := l.intentOf(pm.order + "-1")
			how := [...]string{"failed", "canceled"}[i%2]
			if err := l.finish(pi1, how); err != nil {
				t.Error(err)
				return
			}
			first := l.takeEvents(pi1)
			ds := nt.storm(ctx, copies, first...)
			expectOrder("group 1 "+pm.user+" "+how, ds, string(orderbackend.StatusPending))
			for _, dl := range ds {
				if dl.payment != string(orderbackend.PaymentFailed) {
					t.Errorf("group 1 %s: the %s event answered payment %q, want failed", pm.user, how, dl.payment)
				}
			}
			again := &payment{user: pm.user, token: pm.token, order: pm.order, payBefore: pm.payBefore}
			p.pay(ctx, again, i%len(gws), true)
			if again.outcome != "paid" {
				t.Errorf("group 1 %s: the second attempt ended %s, want paid", pm.user, again.outcome)
				return
			}
			pi2 := l.intentOf(pm.order + "-2")
			paid, err := l.event(pi2, "payment_intent.succeeded")
			if err != nil {
				t.Error(err)
				return
			}
			l.cancelAbandoned(pi1) // the shop tidies the failed one up: payment_intent.canceled
			late := append(append([]ledgerEvent{paid}, first...), l.takeEvents(pi1)...)
			ds = nt.storm(ctx, copies, late...)
			expectOrder("group 1 "+pm.user+" after paid", ds, string(orderbackend.StatusPaid))
		}()
	}
	for _, pm := range byGroup[noteAnswered] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ev, err := l.event(l.intentOf(pm.order+"-1"), "payment_intent.succeeded")
			if err != nil {
				t.Error(err)
				return
			}
			ds := nt.storm(ctx, copies, ev)
			expectOrder("group 3 "+pm.user, ds, string(orderbackend.StatusPaid))
		}()
	}

	waitFor(t, "the storm's first answers", time.Minute, func() bool { return nt.stormed.Load() >= stormFrom+int64(copies) })
	killedAt := time.Now()
	gws[1].kill()
	gws[1].restart()
	restartTook := time.Since(killedAt)
	phase("gateway 2 killed and restarted")

	// Group 2: once the window closed and the sweeper cancelled the orders, the success.
	late := map[string]bool{}
	for _, pm := range byGroup[noteLate] {
		late[pm.order] = true
	}
	swept := waitFor(t, "the late group's orders swept", time.Minute, func() bool {
		orders, err := e.orders().Orders(ctx, act.id)
		if err != nil {
			return false
		}
		n := 0
		for _, o := range orders {
			if late[o.ID] && o.Status == orderbackend.StatusCancelled {
				n++
			}
		}
		return n == len(late)
	})
	for _, pm := range byGroup[noteLate] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ds, ok := succeed(pm.order)
			if !ok {
				return
			}
			expectOrder("group 2 "+pm.user, ds, string(orderbackend.StatusCancelled))
			for _, dl := range ds {
				if dl.payment != string(orderbackend.PaymentRefundDue) && dl.payment != string(orderbackend.PaymentRefunded) {
					t.Errorf("group 2 %s: event %s answered payment %q, want refund_due or refunded", pm.user, dl.event, dl.payment)
				}
			}
		}()
	}
	wg.Wait()
	phase("storm and late group")
	// The sweeper's own cancels (a Lookup that found a PaymentIntent back to
	// requires_payment_method) made events too: Stripe delivers them.
	var rest []ledgerEvent
	for _, pm := range pms {
		for _, k := range []string{"-1", "-2"} {
			if pi := l.intentOf(pm.order + k); pi != "" {
				rest = append(rest, l.takeEvents(pi)...)
			}
		}
	}
	for _, dl := range nt.storm(ctx, copies, rest...) {
		if dl.status != http.StatusOK || (dl.code != "stored" && dl.code != "duplicate") {
			t.Errorf("event %s of a cancel by the sweeper: %d %s %s, want 200 stored or duplicate", dl.event, dl.status, dl.code, dl.err)
		}
	}

	// Every event of the scenario: one delivery stored, the others duplicates.
	perEvent := map[string][]delivery{}
	for _, dl := range nt.deliveries() {
		if dl.code == "stored" || dl.code == "duplicate" {
			perEvent[dl.event] = append(perEvent[dl.event], dl)
		}
	}
	for ev, ds := range perEvent {
		stored, redone := 0, 0
		for _, dl := range ds {
			if dl.code == "stored" {
				stored++
			}
			redone += dl.redone
		}
		// A delivery answered 5xx may have been stored before the answer was lost: then every
		// later one is a duplicate.
		if stored > 1 || (stored == 0 && redone == 0) {
			t.Errorf("event %s: %d of its %d deliveries answered stored, want exactly 1", ev, stored, len(ds))
		}
	}

	rep := e.moneyEnd(d, l)
	phase("money end")
	want := int64(len(byGroup[noteLate]))
	if rep.Charges != n || rep.Refunds != want || rep.Paid != n-want || rep.Cancelled != want {
		t.Errorf("reconcile: charges %d, refunds %d, paid %d, cancelled %d; want %d, %d, %d, %d",
			rep.Charges, rep.Refunds, rep.Paid, rep.Cancelled, n, want, n-want, want)
	}
	ps, err := e.orders().Payments(ctx, act.id)
	if err != nil {
		t.Fatal(err)
	}
	gmu.Lock()
	defer gmu.Unlock()
	for _, pay := range ps {
		g := group[pay.OrderID]
		wantStatus := orderbackend.PaymentSucceeded
		switch {
		case g == noteRepaid && pay.Attempt == 1:
			wantStatus = orderbackend.PaymentFailed
		case g == noteLate:
			wantStatus = orderbackend.PaymentRefunded
		}
		if pay.Status != wantStatus || (g != noteRepaid && pay.Attempt != 1) || pay.Attempt > 2 {
			t.Errorf("group %d payment %s: %s, want %s", g, pay.Key, pay.Status, wantStatus)
		}
	}
	if u := l.untaken(); u != 0 {
		t.Errorf("%d events of the ledger were never delivered", u)
	}

	// Every event once more, and the refusals, on the settled database: nothing may change.
	var replay []ledgerEvent
	seen := map[string]bool{}
	for _, dl := range nt.deliveries() {
		if (dl.code == "stored" || dl.code == "duplicate") && !seen[dl.event] {
			seen[dl.event] = true
			replay = append(replay, ledgerEvent{ID: dl.event, Body: nt.body(dl.event)})
		}
	}
	before = e.moneyState()
	for _, dl := range nt.storm(ctx, 1, replay...) {
		if dl.status != http.StatusOK || dl.code != "duplicate" {
			t.Errorf("event %s replayed after the end: %d %s %s, want 200 duplicate", dl.event, dl.status, dl.code, dl.err)
		}
	}
	refused += nt.sendRefusals(ctx, rs, 1)
	e.unchanged("every event replayed, and the refusals, after the end", before, e.moneyState())
	phase("replayed after the end")

	counts := map[string]int{}
	redeliveries, again, lost := 0, 0, 0
	for _, dl := range nt.deliveries() {
		counts[fmt.Sprintf("%d %s", dl.status, dl.code)]++
		redeliveries += dl.redone
		if dl.redone > 0 {
			again++
		}
		if dl.lost {
			lost++
		}
	}
	repaid := 0
	p.mu.Lock()
	for _, pm := range p.payments {
		for _, c := range pm.calls {
			if c.status == 0 && c.sent.Before(killedAt.Add(restartTook)) && c.got.After(killedAt) {
				repaid++
			}
		}
	}
	p.mu.Unlock()
	t.Logf("winners per group (paid by notification, failed then repaid, succeeded after the sweep, answered at once): %d, %d, %d, %d; first pay calls answered %s after they began; late group swept %s after; deliveries %d (%s), %d events, %d bad or foreign sent, gateway 2 killed %s after the storm began, restarted in %s: %d deliveries without an answer delivered again (%d times in all; %d of them had lost an answer, the others found the port closed), %d pay calls without an answer; done after (since the gateways were up): %s",
		len(byGroup[0]), len(byGroup[1]), len(byGroup[2]), len(byGroup[3]), firstPaid.Round(time.Millisecond), swept.Round(time.Millisecond),
		len(nt.deliveries()), joinCounts(counts), len(perEvent), refused, killedAt.Sub(stormBegan).Round(time.Millisecond), restartTook.Round(time.Millisecond),
		again, redeliveries, lost, repaid, strings.Join(phases, ", "))
}
