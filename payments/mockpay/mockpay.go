// Package mockpay is the demo's payment provider: it accepts every charge, in memory, and takes no
// money. It keeps the provider's promises (idempotent per key, a lookup finds a charge, a refund
// is given once) so that the order backend's payment flow runs end to end without an account
// anywhere; a process restart forgets its charges. For a demo and tests only: the gateway warns
// when it serves a non-loopback listener (package payments/mockpay's module).
package mockpay

import (
	"context"
	"fmt"
	"sync"

	"github.com/caddy-seckill/caddy-seckill/money"
	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

// Provider is the mock payment provider; its zero value is ready.
type Provider struct {
	mu       sync.Mutex
	charges  map[string]money.Price // idempotency key → amount
	refunded map[string]bool
}

var _ orderbackend.Payments = (*Provider)(nil)

// Charge implements orderbackend.Payments: it succeeds, once per key.
func (p *Provider) Charge(ctx context.Context, c orderbackend.ChargeRequest) (orderbackend.ChargeResult, error) {
	if err := ctx.Err(); err != nil {
		return orderbackend.ChargeResult{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.charges == nil {
		p.charges = map[string]money.Price{}
	}
	if _, ok := p.charges[c.Key]; !ok {
		p.charges[c.Key] = c.Amount
	}
	return orderbackend.ChargeResult{Outcome: orderbackend.ChargeSucceeded, Ref: ref(c.Key)}, nil
}

// Lookup implements orderbackend.Payments.
func (p *Provider) Lookup(ctx context.Context, key string) (orderbackend.ChargeResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.charges[key]; ok {
		return orderbackend.ChargeResult{Outcome: orderbackend.ChargeSucceeded, Ref: ref(key)}, nil
	}
	return orderbackend.ChargeResult{Outcome: orderbackend.ChargeFailed}, nil
}

// Refund implements orderbackend.Payments.
func (p *Provider) Refund(ctx context.Context, key, reference string, amount money.Price) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if got, ok := p.charges[key]; !ok || got != amount || reference != ref(key) {
		return fmt.Errorf("mockpay: refund %s of %s (%s): no such charge", key, amount, reference)
	}
	if p.refunded == nil {
		p.refunded = map[string]bool{}
	}
	p.refunded[key] = true
	return nil
}

// Charged reports whether a charge was taken under key; Refunded whether it was given back.
func (p *Provider) Charged(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.charges[key]
	return ok
}

// Refunded reports whether the charge under key was given back.
func (p *Provider) Refunded(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refunded[key]
}

func ref(key string) string { return "mock_" + key }
