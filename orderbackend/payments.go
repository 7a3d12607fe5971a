package orderbackend

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/money"
)

// Payments is the payment provider the order backend charges (payments/*: the seckill.payments
// modules). Every call of one attempt carries the attempt's idempotency key (Payment.Key), so a
// repeated call takes the money once and a lookup finds what a lost answer said.
type Payments interface {
	// Charge takes the attempt's amount. ChargeSucceeded: the money is taken; ChargeFailed: it
	// was not (declined), and will not be under this key; ChargePending: the provider confirms
	// later (a notification). An error means the outcome is unknown: the attempt stays open and
	// the sweeper asks Lookup.
	Charge(ctx context.Context, c ChargeRequest) (ChargeResult, error)

	// Lookup tells what became of the attempt with this key: ChargeFailed when the provider has no
	// successful charge under it (none at all, or declined).
	Lookup(ctx context.Context, key string) (ChargeResult, error)

	// Refund gives back the whole amount charged under key (ref is Charge's or Lookup's
	// ChargeResult.Ref). It is idempotent per key: refunding again refunds once.
	Refund(ctx context.Context, key, ref string, amount money.Price) error
}

// ChargeRequest is one payment attempt as a provider sees it.
type ChargeRequest struct {
	Key    string      // the idempotency key (Payment.Key)
	Order  Order       // the order paid for
	Amount money.Price // what to take: the order's amount
	// PaymentMethod is the buyer's means of payment from the pay call's body (for Stripe a
	// PaymentMethod id made by Stripe.js on the shop's page); "" when the body named none.
	PaymentMethod string
}

// PaymentMethodRequirer is a provider that cannot charge without ChargeRequest.PaymentMethod: the
// order API answers a pay call without one 400 payment_method_required before recording anything.
type PaymentMethodRequirer interface {
	RequiresPaymentMethod() bool
}

// ChargeOutcome is what a provider said about an attempt.
type ChargeOutcome string

// The charge outcomes.
const (
	ChargeSucceeded ChargeOutcome = "succeeded"
	ChargeFailed    ChargeOutcome = "failed"
	ChargePending   ChargeOutcome = "pending"
)

// ChargeResult is a provider's answer about an attempt.
type ChargeResult struct {
	Outcome ChargeOutcome
	Ref     string // the provider's id of the charge, when it has one
	// NextURL is where the buyer completes a ChargePending payment (the provider's page), when
	// the provider has one; the pay call answers it as next_url.
	NextURL string
}

// PaymentStatus is the state of a payment attempt: started (recorded, no outcome yet), then
// failed (no money taken) or succeeded (it paid its order); refund_due (money taken for an order
// it could not pay) then refunded.
type PaymentStatus string

// The payment attempt states.
const (
	PaymentStarted   PaymentStatus = "started"
	PaymentFailed    PaymentStatus = "failed"
	PaymentSucceeded PaymentStatus = "succeeded"
	PaymentRefundDue PaymentStatus = "refund_due"
	PaymentRefunded  PaymentStatus = "refunded"
)

// Charged reports whether the attempt took money (whether or not it was given back).
func (s PaymentStatus) Charged() bool {
	return s == PaymentSucceeded || s == PaymentRefundDue || s == PaymentRefunded
}

// Payment is one payment attempt of an order, recorded before its provider is called.
type Payment struct {
	Key         string // the idempotency key: order id, "-", attempt number
	OrderID     string
	Attempt     int
	Amount      money.Price
	Status      PaymentStatus
	ProviderRef string // the provider's id of the charge, once known
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// ErrNotRefundable: MarkRefunded of an attempt that has no refund due.
var ErrNotRefundable = errors.New("payment has no refund due")

// paymentKey is the idempotency key of an order's attempt.
func paymentKey(orderID string, attempt int) string {
	return orderID + "-" + strconv.Itoa(attempt)
}

// nextPayment is the attempt StartPayment records after last (nil: the order has none).
func nextPayment(o Order, last *Payment, now time.Time) (Payment, bool) {
	if last != nil && last.Status == PaymentStarted {
		return *last, false
	}
	n := 1
	if last != nil {
		n = last.Attempt + 1
	}
	now = time.UnixMilli(now.UnixMilli())
	return Payment{
		Key: paymentKey(o.ID, n), OrderID: o.ID, Attempt: n, Amount: o.Amount, Status: PaymentStarted,
		CreatedAt: now, UpdatedAt: now,
	}, true
}

// touchTime is now as an attempt's updated_at keeps it (milliseconds).
func touchTime(now time.Time) time.Time { return time.UnixMilli(now.UnixMilli()) }

// startErr says why an order cannot start a payment at now, or nil if it can.
func startErr(o Order, now time.Time) error {
	switch {
	case o.Status == StatusPaid:
		return fmt.Errorf("start payment of order %s: %w", o.ID, ErrNotPending)
	case o.Status != StatusPending || !now.Before(o.ExpiresAt):
		return fmt.Errorf("start payment of order %s (%s, window closed %s): %w",
			o.ID, o.Status, o.ExpiresAt.UTC().Format(time.RFC3339), ErrExpired)
	}
	return nil
}

// settled decides an outcome for an attempt in p's state with its order o, at now: the attempt's
// new status, and whether the order becomes paid. An attempt with money never changes.
func settled(p Payment, o Order, outcome ChargeOutcome, now time.Time) (PaymentStatus, bool) {
	switch {
	case p.Status.Charged():
		return p.Status, false
	case outcome == ChargeFailed:
		return PaymentFailed, false
	case outcome != ChargeSucceeded: // pending: still no outcome
		return p.Status, false
	case o.Status == StatusPending && now.Before(o.ExpiresAt):
		return PaymentSucceeded, true
	}
	return PaymentRefundDue, false
}

// refundDue gives back the money of a PaymentRefundDue attempt and records it; the provider's
// idempotency per key and the recorded state make it happen once however often it is tried.
func refundDue(ctx context.Context, repo Repository, pay Payments, p Payment, now time.Time, log *zap.Logger, m *Metrics) (Payment, error) {
	if p.Status != PaymentRefundDue {
		return p, nil
	}
	if err := pay.Refund(ctx, p.Key, p.ProviderRef, p.Amount); err != nil {
		m.PaymentErrors.Add(1)
		return p, fmt.Errorf("refund payment %s: %w", p.Key, err)
	}
	m.Refunds.Add(1)
	r, err := repo.MarkRefunded(ctx, p.Key, now)
	if err != nil {
		return p, fmt.Errorf("record refund of payment %s: %w", p.Key, err)
	}
	log.Info("payment refunded", zap.String("payment", p.Key), zap.String("order", p.OrderID),
		zap.String("amount", p.Amount.String()))
	return r, nil
}
