package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
	"github.com/caddy-seckill/caddy-seckill/money"
	"github.com/caddy-seckill/caddy-seckill/orderbackend"
	"github.com/caddy-seckill/caddy-seckill/payments/stripepay"
)

// TestStripeLedger checks the ledger the payment scenarios charge against: every request the
// real stripepay provider sends it is also sent to stripe-mock, which validates it against
// Stripe's API specification (a parameter Stripe does not know fails the test there), and the
// ledger's answers are read by stripe-go itself. Then its memory: a charge repeated under its key
// is taken once, a second refund gives nothing back, a lookup finds the charge by its key, a
// PaymentIntent processing is pending until it succeeds, and a repeat with other parameters is
// refused (Stripe's idempotency_error, an unknown outcome for the provider).
func TestStripeLedger(t *testing.T) {
	sm := testsrv.StartStripeMock(t)
	l := startLedger(t)
	l.validate = sm.URL
	p := stripepay.New(ledgerSecret, l.url(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	usd := money.Price{Amount: payAmountCents, Currency: "USD"}
	charge := orderbackend.ChargeRequest{Key: "o1-1", Order: orderbackend.Order{ID: "o1", Title: "Chaos sale"}, Amount: usd, PaymentMethod: payMethod}

	r1, err := p.Charge(ctx, charge)
	if err != nil || r1.Outcome != orderbackend.ChargeSucceeded || r1.Ref == "" {
		t.Fatalf("charge: %+v, %v", r1, err)
	}
	r2, err := p.Charge(ctx, charge)
	if err != nil || r2 != r1 {
		t.Fatalf("charge again under the key: %+v, %v; want the first answer %+v", r2, err, r1)
	}
	other := charge
	other.PaymentMethod = "pm_card_mastercard"
	if r, err := p.Charge(ctx, other); err == nil {
		t.Fatalf("the key with another payment method: %+v, want an error (idempotency_error)", r)
	}
	if r, err := p.Lookup(ctx, "o1-1"); err != nil || r != r1 {
		t.Fatalf("lookup: %+v, %v; want %+v", r, err, r1)
	}
	if r, err := p.Lookup(ctx, "o9-1"); err != nil || r.Outcome != orderbackend.ChargeFailed {
		t.Fatalf("lookup of a key never charged: %+v, %v; want failed", r, err)
	}
	for i := 0; i < 2; i++ {
		if err := p.Refund(ctx, "o1-1", r1.Ref, usd); err != nil {
			t.Fatalf("refund %d: %v", i+1, err)
		}
	}
	// Another key for the same PaymentIntent: Stripe's charge_already_refunded, done for stripepay.
	if err := p.Refund(ctx, "o1-1-again", r1.Ref, usd); err != nil {
		t.Fatalf("refund under another key: %v", err)
	}

	l.setBehaviour(func(string) chargeBehaviour { return chargeBehaviour{processing: 300 * time.Millisecond} })
	charge2 := orderbackend.ChargeRequest{Key: "o2-1", Order: orderbackend.Order{ID: "o2"}, Amount: usd, PaymentMethod: payMethod}
	if r, err := p.Charge(ctx, charge2); err != nil || r.Outcome != orderbackend.ChargePending {
		t.Fatalf("a processing charge: %+v, %v; want pending", r, err)
	}
	if r, err := p.Lookup(ctx, "o2-1"); err != nil || r.Outcome != orderbackend.ChargePending {
		t.Fatalf("lookup while processing: %+v, %v; want pending", r, err)
	}
	time.Sleep(400 * time.Millisecond)
	if r, err := p.Lookup(ctx, "o2-1"); err != nil || r.Outcome != orderbackend.ChargeSucceeded {
		t.Fatalf("lookup once succeeded: %+v, %v; want succeeded", r, err)
	}

	lt := l.totals()
	if lt.Intents != 2 || lt.Succeeded != 2 || lt.Refunds != 1 || lt.MultiRefunded != 0 || lt.RefundedAmount != payAmountCents {
		t.Fatalf("ledger totals %+v: want 2 PaymentIntents, both succeeded, one refund of %d", lt, payAmountCents)
	}
	t.Logf("ledger: %s", l.counts())
}
