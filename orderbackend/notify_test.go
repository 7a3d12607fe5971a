package orderbackend

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/caddy-seckill/caddy-seckill/money"
)

var notifyScenarios = []scenario{
	{"NotifyPayment", testNotifyPayment},
	{"NotifyConcurrentReplays", testNotifyConcurrentReplays},
	{"NotifyLateSuccessRefundedOnce", testNotifyLateSuccessRefundedOnce},
	{"NotifyAPI", testNotifyAPI},
}

// notifyEvent is NotifyPayment of one event at now.
func notifyEvent(ctx context.Context, repo Repository, id, key string, out ChargeOutcome, now time.Time) (NotifyResult, error) {
	return repo.NotifyPayment(ctx, Notification{Provider: "test", EventID: id, Key: key, Outcome: out, Ref: "ch_" + key}, now)
}

// The repository's rules for notifications: idempotent by event id, any order of arrival, a
// failure after a success never un-pays, a late success of an earlier attempt never touches the
// order a later attempt paid, and an unknown key or a malformed notification stores nothing.
func testNotifyPayment(t *testing.T, e *env) {
	ctx := context.Background()
	if err := e.repo.EnsureStock(ctx, "a", 10); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Millisecond)
	n := newOrder("a", "r1", "u1", 1, now.Add(time.Hour))
	n.Amount = money.Price{Amount: 19900, Currency: "USD"}
	o, _, err := e.repo.CreateOrder(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	p1, err := e.repo.StartPayment(ctx, o.ID, now)
	if err != nil {
		t.Fatal(err)
	}
	// Unknown key, malformed notifications: refused, nothing stored (the event id stays free).
	if _, err := notifyEvent(ctx, e.repo, "evt_x", "nope-1", ChargeSucceeded, now); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown key: %v, want ErrNotFound", err)
	}
	for _, bad := range []Notification{
		{Provider: "test", Key: p1.Key, Outcome: ChargeSucceeded},
		{Provider: "test", EventID: "e", Outcome: ChargeSucceeded},
		{EventID: "e", Key: p1.Key, Outcome: ChargeSucceeded},
		{Provider: "test", EventID: "e", Key: p1.Key, Outcome: "refunded"},
	} {
		if _, err := e.repo.NotifyPayment(ctx, bad, now); !errors.Is(err, ErrBadNotification) {
			t.Errorf("%+v: %v, want ErrBadNotification", bad, err)
		}
	}
	// A decline of the first attempt, replayed: the second delivery changes nothing.
	r, err := notifyEvent(ctx, e.repo, "evt_1", p1.Key, ChargeFailed, now)
	if err != nil || r.Duplicate || r.Paid || r.Payment.Status != PaymentFailed || r.Order.Status != StatusPending {
		t.Fatalf("decline = %+v, %v", r, err)
	}
	if r, err := notifyEvent(ctx, e.repo, "evt_1", p1.Key, ChargeSucceeded, now); err != nil || !r.Duplicate || r.Payment.Status != PaymentFailed {
		t.Fatalf("replayed event id with another outcome = %+v, %v; want a duplicate that changes nothing", r, err)
	}
	// The event id refused above for an unknown key was not stored.
	p2, err := e.repo.StartPayment(ctx, o.ID, now)
	if err != nil || p2.Key != o.ID+"-2" {
		t.Fatalf("second attempt = %+v, %v", p2, err)
	}
	// Pending changes nothing and is stored.
	if r, err := notifyEvent(ctx, e.repo, "evt_p", p2.Key, ChargePending, now); err != nil || r.Payment.Status != PaymentStarted {
		t.Fatalf("pending = %+v, %v", r, err)
	}
	paidAt := now.Add(time.Second)
	r, err = notifyEvent(ctx, e.repo, "evt_x", p2.Key, ChargeSucceeded, paidAt)
	if err != nil || r.Duplicate || !r.Paid || r.Payment.Status != PaymentSucceeded || r.Order.Status != StatusPaid ||
		r.Order.PaymentRef != p2.Key || r.Payment.ProviderRef != "ch_"+p2.Key {
		t.Fatalf("success = %+v, %v", r, err)
	}
	if r, err := notifyEvent(ctx, e.repo, "evt_x", p2.Key, ChargeSucceeded, paidAt.Add(time.Minute)); err != nil || !r.Duplicate || r.Paid ||
		r.Order.Status != StatusPaid || !r.Order.PaidAt.Equal(paidAt) {
		t.Fatalf("replayed success = %+v, %v", r, err)
	}
	// A failure that arrives after the success (out of order) never un-pays.
	if r, err := notifyEvent(ctx, e.repo, "evt_f", p2.Key, ChargeFailed, paidAt); err != nil || r.Duplicate ||
		r.Payment.Status != PaymentSucceeded || r.Order.Status != StatusPaid {
		t.Fatalf("failure after success = %+v, %v", r, err)
	}
	// The first attempt succeeds late: its money is due back; the order stays paid by the second.
	r, err = notifyEvent(ctx, e.repo, "evt_late", p1.Key, ChargeSucceeded, paidAt)
	if err != nil || r.Paid || r.Payment.Status != PaymentRefundDue || r.Order.Status != StatusPaid || r.Order.PaymentRef != p2.Key {
		t.Fatalf("late success of the first attempt = %+v, %v", r, err)
	}
	// A failure of the first attempt now changes nothing either (it holds money).
	if r, err := notifyEvent(ctx, e.repo, "evt_late_f", p1.Key, ChargeFailed, paidAt); err != nil || r.Payment.Status != PaymentRefundDue {
		t.Fatalf("failure after the late success = %+v, %v", r, err)
	}
	// The same event id from another provider is another event.
	other := Notification{Provider: "other", EventID: "evt_x", Key: p2.Key, Outcome: ChargeSucceeded}
	if r, err := e.repo.NotifyPayment(ctx, other, paidAt); err != nil || r.Duplicate {
		t.Fatalf("another provider's event = %+v, %v", r, err)
	}
	if got, _ := e.repo.Order(ctx, o.ID); got.Status != StatusPaid || got.PaymentRef != p2.Key || !got.PaidAt.Equal(paidAt) {
		t.Errorf("order afterwards = %+v", got)
	}
}

// Many deliveries of the same events at once (a provider retrying while the first is in flight):
// each event is stored once, the order is paid once, and exactly one delivery reports paying it.
func testNotifyConcurrentReplays(t *testing.T, e *env) {
	ctx := context.Background()
	if err := e.repo.EnsureStock(ctx, "a", 10); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	o, _, err := e.repo.CreateOrder(ctx, newOrder("a", "r1", "u1", 1, now.Add(time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.repo.StartPayment(ctx, o.ID, now)
	if err != nil {
		t.Fatal(err)
	}
	repos := []Repository{e.repo, e.openRepo(t)} // two processes
	const n = 16
	var fresh, paid atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ev, out := "evt_ok", ChargeSucceeded
			if i%4 == 3 {
				ev, out = "evt_fail", ChargeFailed
			}
			for {
				r, err := notifyEvent(ctx, repos[i%2], ev, p.Key, out, time.Now())
				if errors.Is(err, ErrUnavailable) {
					continue // SQLite busy: the provider would deliver again
				}
				if err != nil {
					t.Error(err)
					return
				}
				if !r.Duplicate {
					fresh.Add(1)
				}
				if r.Paid {
					paid.Add(1)
				}
				return
			}
		}()
	}
	wg.Wait()
	if fresh.Load() != 2 || paid.Load() > 1 {
		t.Errorf("stored %d events (want 2), %d deliveries paid (want at most 1)", fresh.Load(), paid.Load())
	}
	// Whichever came first, the success pays: a failure before it leaves the attempt able to
	// succeed, a failure after it changes nothing.
	got, _ := e.repo.Order(ctx, o.ID)
	ps, _ := e.repo.Payments(ctx, "a")
	if got.Status != StatusPaid || len(ps) != 1 || ps[0].Status != PaymentSucceeded || paid.Load() != 1 {
		t.Errorf("order %+v, payments %+v, paid by %d deliveries", got, ps, paid.Load())
	}
}

// A success notified after the window closed (the sweeper cancelled the order and its item may be
// sold again): the attempt becomes refund_due, the sweeper refunds it exactly once through the
// provider, and replays afterwards change nothing.
func testNotifyLateSuccessRefundedOnce(t *testing.T, e *env) {
	ctx := context.Background()
	if err := e.repo.EnsureStock(ctx, "a", 10); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	exp := now.Add(time.Second)
	n := newOrder("a", "r1", "u1", 1, exp)
	n.Amount = money.Price{Amount: 500, Currency: "EUR"}
	o, _, err := e.repo.CreateOrder(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.repo.StartPayment(ctx, o.ID, now)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := e.repo.CancelExpired(ctx, exp, 10); err != nil || len(c) != 1 {
		t.Fatalf("sweep = %+v, %v", c, err)
	}
	pay := newRecorder()
	pay.charges[p.Key] = n.Amount // the provider took the money; its notification comes late
	r, err := notifyEvent(ctx, e.repo, "evt_late", p.Key, ChargeSucceeded, exp.Add(time.Second))
	if err != nil || r.Paid || r.Payment.Status != PaymentRefundDue || r.Order.Status != StatusCancelled {
		t.Fatalf("late success = %+v, %v", r, err)
	}
	sw := NewSweeper(e.repo, SweeperOptions{Payments: pay, SettleAfter: time.Hour, Logger: e.log})
	for range 3 {
		if err := sw.Settle(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := notifyEvent(ctx, e.repo, "evt_late", p.Key, ChargeSucceeded, time.Now()); err != nil {
			t.Fatal(err)
		}
		if _, err := notifyEvent(ctx, e.repo, fmt.Sprint("evt_again", time.Now().UnixNano()), p.Key, ChargeSucceeded, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	ps, _ := e.repo.Payments(ctx, "a")
	if pay.Refunded(o.ID) != 1 || len(ps) != 1 || ps[0].Status != PaymentRefunded {
		t.Fatalf("refunds asked %d (want 1), payments %+v", pay.Refunded(o.ID), ps)
	}
	rep := Report{}
	rep.reconcileMoney(e.orders(t, "a"), ps)
	if rep.ChargedUnpaid != 0 || rep.Charges != 1 || rep.Refunds != 1 {
		t.Errorf("money = %+v", rep)
	}
}

// signedNotifier is a provider that confirms later by a notification signed with HMAC-SHA256 over
// the body (header X-Test-Signature), the shape of payments/webhookpay without its timestamp; it
// charges like recorder and answers every charge pending.
type signedNotifier struct {
	*recorder
	secret []byte
}

func (s signedNotifier) Charge(ctx context.Context, c ChargeRequest) (ChargeResult, error) {
	return ChargeResult{Outcome: ChargePending, NextURL: "https://pay.example/" + c.Key}, nil
}

func (signedNotifier) NotifyProvider() string { return "test" }

func (s signedNotifier) ParseNotification(h http.Header, body []byte, now time.Time) (Notification, error) {
	mac := hmac.New(sha256.New, s.secret)
	mac.Write(body)
	sig, err := hex.DecodeString(h.Get("X-Test-Signature"))
	if err != nil || !hmac.Equal(sig, mac.Sum(nil)) {
		return Notification{}, ErrBadSignature
	}
	var ev struct {
		ID, Type, Key, Outcome string
	}
	if err := json.Unmarshal(body, &ev); err != nil {
		return Notification{}, fmt.Errorf("%w: %w", ErrBadNotification, err)
	}
	if ev.Type != "payment" {
		return Notification{}, fmt.Errorf("%w: type %q", ErrIgnoredNotification, ev.Type)
	}
	if ev.Outcome == string(ChargeSucceeded) {
		s.set(func(r *recorder) { r.charges[ev.Key] = testListing.Price })
	}
	return Notification{EventID: ev.ID, Key: ev.Key, Outcome: ChargeOutcome(ev.Outcome), Ref: "ch_" + ev.Key}, nil
}

// post sends a notification to the API and decodes the JSON answer.
func (s signedNotifier) post(t *testing.T, srv *httptest.Server, path string, ev map[string]string, sign bool) (int, map[string]any) {
	t.Helper()
	body, _ := json.Marshal(ev)
	req, _ := http.NewRequest(http.MethodPost, srv.URL+path, bytes.NewReader(body))
	if sign {
		mac := hmac.New(sha256.New, s.secret)
		mac.Write(body)
		req.Header.Set("X-Test-Signature", hex.EncodeToString(mac.Sum(nil)))
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

// The notification endpoint: a pay call answered pending (202 with next_url), then refusals that
// change nothing (no or a bad signature, an unknown attempt, the wrong provider, GET, a database
// that cannot store it: 5xx), a foreign event type ignored with 200, the outcome stored with 200
// and the buyer's result paid, and a replay answered 200 duplicate.
func testNotifyAPI(t *testing.T, e *env) {
	e.openActivity(t, "sale", 1, 1, time.Hour)
	pay := signedNotifier{newRecorder(), []byte("whsec")}
	b, srv := e.startBackend(t, pay, time.Hour)
	e.admit(t, "sale", "u1", 1)
	eventually(t, "u1 pending", func() bool { return e.result(t, "sale", "u1").Code == resultPending })
	id := e.result(t, "sale", "u1").OrderID
	body := expect(t, srv, "POST", "/orders/"+id+"/pay", token(t, "u1"), 202, "payment_pending")
	key := id + "-1"
	if body["next_url"] != "https://pay.example/"+key {
		t.Errorf("pending answer %v: want next_url", body)
	}
	const path = "/orders/webhooks/test"
	ok := map[string]string{"id": "evt_1", "type": "payment", "key": key, "outcome": "succeeded"}
	for _, c := range []struct {
		path   string
		ev     map[string]string
		sign   bool
		status int
		code   string
	}{
		{path, ok, false, 400, "bad_signature"},
		{path, map[string]string{"id": "evt_1", "type": "payment", "key": id + "-9", "outcome": "succeeded"}, true, 404, "unknown_payment"},
		{path, map[string]string{"id": "evt_1", "type": "payment", "key": key, "outcome": "maybe"}, true, 400, "bad_notification"},
		{"/orders/webhooks/stripe", ok, true, 404, "not_found"},
		{path, map[string]string{"id": "evt_2", "type": "customer.created"}, true, 200, "ignored"},
	} {
		if st, got := pay.post(t, srv, c.path, c.ev, c.sign); st != c.status || got["code"] != c.code {
			t.Errorf("%s %v signed %v = %d %v, want %d %s", c.path, c.ev, c.sign, st, got, c.status, c.code)
		}
	}
	expect(t, srv, "GET", path, "", 405, "method_not_allowed")
	if ps, _ := e.repo.Payments(context.Background(), "sale"); len(ps) != 1 || ps[0].Status != PaymentStarted {
		t.Fatalf("after the refusals: %+v", ps)
	}
	// A database that cannot store the event: 5xx, so the provider delivers again.
	e.exec(t, `ALTER TABLE payment_events RENAME TO payment_events_away`, `ALTER TABLE payment_events RENAME TO payment_events_away`)
	if st, got := pay.post(t, srv, path, ok, true); st < 500 {
		t.Errorf("with the events table gone: %d %v, want 5xx", st, got)
	}
	e.exec(t, `ALTER TABLE payment_events_away RENAME TO payment_events`, `ALTER TABLE payment_events_away RENAME TO payment_events`)
	if o, _ := e.repo.Order(context.Background(), id); o.Status != StatusPending {
		t.Fatalf("a notification that was not stored changed the order: %+v", o)
	}
	if st, got := pay.post(t, srv, path, ok, true); st != 200 || got["code"] != "stored" || got["order_status"] != "paid" {
		t.Fatalf("notification = %d %v", st, got)
	}
	eventually(t, "u1 paid", func() bool { return e.result(t, "sale", "u1").Code == "paid" })
	if st, got := pay.post(t, srv, path, ok, true); st != 200 || got["code"] != "duplicate" {
		t.Errorf("replay = %d %v", st, got)
	}
	r := e.eventuallyReconciled(t, "sale")
	if r.Charges != 1 || r.Paid != 1 || r.ChargedUnpaid != 0 {
		t.Errorf("report %+v", r)
	}
	// A path naming a provider that is not the backend's is counted under "unknown", never
	// under the caller's word: the labels stay a fixed set.
	if st, got := pay.post(t, srv, "/orders/webhooks/evil%22%7Bx%7D", ok, true); st != 404 || got["code"] != "not_found" {
		t.Errorf("made-up provider = %d %v", st, got)
	}
	// Every counter of the provider exists from the start, at 0 until counted (too_large here).
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewNotificationCollector(b.Notifications))
	want := `# HELP caddy_seckill_orders_notifications_total ` + notificationsHelp + `
# TYPE caddy_seckill_orders_notifications_total counter
caddy_seckill_orders_notifications_total{provider="test",result="duplicate"} 1
caddy_seckill_orders_notifications_total{provider="test",result="ignored"} 1
caddy_seckill_orders_notifications_total{provider="test",result="stored"} 1
# HELP caddy_seckill_orders_notifications_refused_total ` + notificationsRefusedHelp + `
# TYPE caddy_seckill_orders_notifications_refused_total counter
caddy_seckill_orders_notifications_refused_total{provider="test",reason="bad_notification"} 1
caddy_seckill_orders_notifications_refused_total{provider="test",reason="bad_signature"} 1
caddy_seckill_orders_notifications_refused_total{provider="test",reason="method"} 1
caddy_seckill_orders_notifications_refused_total{provider="test",reason="too_large"} 0
caddy_seckill_orders_notifications_refused_total{provider="test",reason="unknown_payment"} 1
caddy_seckill_orders_notifications_refused_total{provider="test",reason="unstored"} 1
caddy_seckill_orders_notifications_refused_total{provider="unknown",reason="unknown_provider"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if m := b.Metrics(); m.Paid != 1 {
		t.Errorf("paid %d, want 1", m.Paid)
	}
}
