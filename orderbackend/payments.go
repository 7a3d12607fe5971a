package orderbackend

import (
	"context"
	"errors"
	"sync"
)

// ErrPaymentDeclined is returned by a Payments provider that refused to take the money.
var ErrPaymentDeclined = errors.New("payment declined")

// Payments is the payment provider the order API charges. Charge is idempotent per order (the
// order id is the idempotency key): charging an order again returns the first charge's reference
// and takes the money once. Refund gives back a charge whose order could not be marked paid
// because the payment window closed meanwhile.
type Payments interface {
	Charge(ctx context.Context, o Order) (ref string, err error)
	Refund(ctx context.Context, o Order, ref string) error
}

// MockPayments is a payment provider that accepts every charge and remembers charges and refunds.
// It stands in for a real provider in the standalone backend and in tests; a shop plugs its own
// provider in through Payments.
type MockPayments struct {
	mu       sync.Mutex
	charges  map[string]string // order id → reference
	refunded map[string]bool
}

// Charge implements Payments.
func (m *MockPayments) Charge(ctx context.Context, o Order) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.charges == nil {
		m.charges = map[string]string{}
	}
	if ref, ok := m.charges[o.ID]; ok {
		return ref, nil
	}
	ref := "mock-" + o.ID
	m.charges[o.ID] = ref
	return ref, nil
}

// Refund implements Payments.
func (m *MockPayments) Refund(ctx context.Context, o Order, ref string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.charges[o.ID] != ref {
		return errors.New("refund of an unknown charge")
	}
	if m.refunded == nil {
		m.refunded = map[string]bool{}
	}
	m.refunded[o.ID] = true
	return nil
}

// Charged reports whether the order was charged; Refunded whether that charge was given back.
func (m *MockPayments) Charged(orderID string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.charges[orderID]
	return ok
}

// Refunded reports whether the order's charge was given back.
func (m *MockPayments) Refunded(orderID string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.refunded[orderID]
}
