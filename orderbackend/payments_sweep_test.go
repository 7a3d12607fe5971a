package orderbackend

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/money"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// heldCharge is a recorder whose charges, once hold is set, wait in flight (entered is closed)
// until proceed is closed, then take the money and lose the answer.
type heldCharge struct {
	*recorder
	hold             bool
	entered, proceed chan struct{}
}

func (h *heldCharge) Charge(ctx context.Context, c ChargeRequest) (ChargeResult, error) {
	h.mu.Lock()
	hold := h.hold
	h.mu.Unlock()
	if !hold {
		return h.recorder.Charge(ctx, c)
	}
	close(h.entered)
	select {
	case <-h.proceed:
	case <-ctx.Done():
		return ChargeResult{}, ctx.Err()
	}
	h.set(func(r *recorder) { r.loseNext = true })
	return h.recorder.Charge(ctx, c)
}

// A buyer retries an unanswered pay call just before SettleAfter has passed since the attempt
// was recorded. The retry charges under the same key; the sweeper must not take the attempt for
// one nobody is charging and ask the provider while that charge is in flight (the provider has
// nothing yet: the attempt would end failed), because the charge then takes the money and its
// answer is lost: a failed attempt is never asked about again, and the money would stand without
// a paid order or a refund.
func testRetryNotLookedUpInFlight(t *testing.T, e *env) {
	ctx := context.Background()
	if err := e.repo.EnsureStock(ctx, "a", 10); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Truncate(time.Millisecond)
	n := newOrder("a", "r1", "u1", 1, t0.Add(time.Hour))
	n.Amount = money.Price{Amount: 19900, Currency: "USD"}
	o, _, err := e.repo.CreateOrder(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: t0}
	pay := &heldCharge{recorder: newRecorder(), entered: make(chan struct{}), proceed: make(chan struct{})}
	api, err := NewAPI(e.repo, APIOptions{Auth: testAuth(t), Payments: pay, ChargeTimeout: 30 * time.Second,
		Now: clk.Now, Logger: e.log})
	if err != nil {
		t.Fatal(err)
	}
	sw := NewSweeper(e.repo, SweeperOptions{Payments: pay, SettleAfter: time.Minute, Now: clk.Now, Logger: e.log})
	payCall := func() int {
		req := httptest.NewRequest(http.MethodPost, "/orders/"+o.ID+"/pay", nil)
		req.Header.Set("Authorization", "Bearer "+token(t, "u1"))
		w := httptest.NewRecorder()
		api.ServeHTTP(w, req)
		return w.Code
	}

	pay.set(func(r *recorder) { r.down = true })
	if c := payCall(); c != http.StatusServiceUnavailable {
		t.Fatalf("pay with the provider down = %d, want 503", c)
	}
	pay.set(func(r *recorder) { r.down = false })

	clk.set(t0.Add(59 * time.Second))
	pay.set(func(*recorder) { pay.hold = true })
	done := make(chan int, 1)
	go func() { done <- payCall() }()
	<-pay.entered
	clk.set(t0.Add(61 * time.Second))
	_ = sw.Settle(ctx) // the sweep during the retry's charge
	close(pay.proceed)
	if c := <-done; c != http.StatusServiceUnavailable {
		t.Fatalf("retry whose answer is lost = %d, want 503", c)
	}

	clk.set(t0.Add(10 * time.Minute))
	for range 3 {
		if err := sw.Settle(ctx); err != nil {
			t.Fatal(err)
		}
	}
	ps, err := e.repo.Payments(ctx, "a")
	if err != nil || len(ps) != 1 {
		t.Fatalf("payments = %+v, %v", ps, err)
	}
	got, _ := e.repo.Order(ctx, o.ID)
	if pay.Charged(o.ID) != 1 || ps[0].Status != PaymentSucceeded || got.Status != StatusPaid {
		t.Errorf("the provider took the money (charged %d, refunded %d) but the attempt is %s and the order %s: a charge stands without a paid order or a refund",
			pay.Charged(o.ID), pay.Refunded(o.ID), ps[0].Status, got.Status)
	}
}

// pendingLookups is a recorder whose lookups answer pending for some keys: buyers who were sent
// to a provider's page (payments webhook's next_url) and never finished there.
type pendingLookups struct {
	*recorder
	pending map[string]bool
	failing bool // the pending keys' lookups fail instead
}

func (p *pendingLookups) Lookup(ctx context.Context, key string) (ChargeResult, error) {
	p.mu.Lock()
	pend, failing := p.pending[key], p.failing
	p.mu.Unlock()
	switch {
	case pend && failing:
		return ChargeResult{}, errors.New("provider: no answer about " + key)
	case pend:
		return ChargeResult{Outcome: ChargePending}, nil
	}
	return p.recorder.Lookup(ctx, key)
}

// More attempts stay pending at the provider than the sweeper's batch (abandoned payment pages).
// A success notified after its order's window closed is refund_due, which only the sweeper
// refunds: it must not wait behind the pending attempts for as long as they stay pending.
func testRefundNotStarvedByPending(t *testing.T, e *env) { refundNotStarved(t, e, false) }

// The same with attempts the provider keeps failing to answer about (an error on every lookup).
func testRefundNotStarvedByFailingLookups(t *testing.T, e *env) { refundNotStarved(t, e, true) }

func refundNotStarved(t *testing.T, e *env, failing bool) {
	ctx := context.Background()
	if err := e.repo.EnsureStock(ctx, "a", 10); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Truncate(time.Millisecond)
	clk := &fakeClock{t: t0}
	pay := &pendingLookups{recorder: newRecorder(), pending: map[string]bool{}, failing: failing}
	sw := NewSweeper(e.repo, SweeperOptions{Payments: pay, Batch: 2, SettleAfter: time.Minute, Now: clk.Now, Logger: e.log})
	for _, u := range []string{"u1", "u2"} {
		o, _, err := e.repo.CreateOrder(ctx, newOrder("a", "r-"+u, u, 1, t0.Add(time.Hour)))
		if err != nil {
			t.Fatal(err)
		}
		p, err := e.repo.StartPayment(ctx, o.ID, t0)
		if err != nil {
			t.Fatal(err)
		}
		pay.pending[p.Key] = true
	}
	n := newOrder("a", "r-u3", "u3", 1, t0.Add(30*time.Second))
	n.Amount = money.Price{Amount: 19900, Currency: "USD"}
	o3, _, err := e.repo.CreateOrder(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	p3, err := e.repo.StartPayment(ctx, o3.ID, t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.repo.CancelExpired(ctx, t0.Add(31*time.Second), 10); err != nil {
		t.Fatal(err)
	}
	// The buyer paid on the provider's page after all; the notification comes after the window.
	pay.charges[p3.Key] = n.Amount
	res, err := e.repo.NotifyPayment(ctx, Notification{Provider: "webhook", EventID: "ev3", Key: p3.Key,
		Outcome: ChargeSucceeded, Ref: "ch_" + p3.Key}, t0.Add(40*time.Second))
	if err != nil || res.Payment.Status != PaymentRefundDue {
		t.Fatalf("late success = %+v, %v", res, err)
	}

	for i := range 5 {
		clk.set(t0.Add(time.Duration(10+i) * time.Minute))
		_ = sw.Settle(ctx)
	}
	if pay.Refunded(o3.ID) != 1 {
		t.Errorf("after 5 sweeps over 5 minutes the late charge is refunded %d times, want 1: the attempts open at the provider (lookups failing: %v) fill every batch",
			pay.Refunded(o3.ID), failing)
	}
}
