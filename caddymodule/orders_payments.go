package caddymodule

import (
	"encoding/json"
	"fmt"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

// paymentsNamespace is the namespace of the payment provider guest modules: seckill.payments.mock
// (the default), seckill.payments.stripe, or a third party's.
const paymentsNamespace = "seckill.payments"

// PaymentsModule is what a guest module of the namespace seckill.payments provides: the
// configuration of the payment provider the embedded order backend charges, which opens it once
// per order backend (a reload that keeps the orders configuration keeps the provider).
type PaymentsModule interface {
	caddy.Module
	OpenPayments(logger *zap.Logger) (orderbackend.Payments, error)
}

// NoMoneyTaker is a payments module that takes no real money (the demo's mock): the gateway warns
// when it serves a listener that is not loopback.
type NoMoneyTaker interface {
	TakesNoMoney() bool
}

// parsePayments parses "payments <name> ..." of the orders block with the named provider module's
// own Caddyfile syntax (its UnmarshalCaddyfile) and returns the module's JSON.
func parsePayments(d *caddyfile.Dispenser) (json.RawMessage, error) {
	if !d.NextArg() {
		return nil, d.Errf("seckill: orders payments: want a provider: one of %s", moduleNames(paymentsNamespace))
	}
	name, unm, err := unmarshalGuest(d, paymentsNamespace, "seckill: orders: unknown payments provider %q: want one of %s")
	if err != nil {
		return nil, err
	}
	if _, ok := unm.(PaymentsModule); !ok {
		return nil, d.Errf("seckill: module %s.%s is not a payment provider (%T)", paymentsNamespace, name, unm)
	}
	return caddyconfig.JSONModuleObject(unm, "provider", name, nil), nil
}

// loadPaymentsModule provisions the orders configuration's payment provider module (mock when
// none is configured). It loads from a copy: Caddy clears a loaded module's JSON, and the JSON is
// part of the order backend's pool key.
func loadPaymentsModule(ctx caddy.Context, c *OrdersConfig) (PaymentsModule, error) {
	cp := *c
	if len(cp.PaymentsRaw) == 0 {
		cp.PaymentsRaw = json.RawMessage(`{"provider":"mock"}`)
	}
	v, err := ctx.LoadModule(&cp, "PaymentsRaw")
	if err != nil {
		return nil, fmt.Errorf("orders payments: %w", err)
	}
	m, ok := v.(PaymentsModule)
	if !ok {
		return nil, fmt.Errorf("orders payments: module %T is not a payment provider (it has no OpenPayments)", v)
	}
	return m, nil
}

// warnNoMoney logs a warning when a provider that takes no money serves a listener reachable
// beyond this machine: buyers there would get their items for nothing. It runs at start, once
// every app is provisioned, so that it can read the HTTP servers' listeners.
func warnNoMoney(ctx caddy.Context, m PaymentsModule, logger *zap.Logger) {
	if n, ok := m.(NoMoneyTaker); !ok || !n.TakesNoMoney() {
		return
	}
	if exposed := exposedListeners(httpListeners(ctx)); len(exposed) > 0 {
		logger.Warn("the payment provider takes no money (payments mock, the demo's) and a listener is not loopback: "+
			"configure a real provider before buyers can reach this server",
			zap.String("provider", string(m.CaddyModule().ID)), zap.Strings("listen", exposed))
	}
}
