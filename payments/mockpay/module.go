package mockpay

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

func init() {
	caddy.RegisterModule(Module{})
}

// Module is the Caddy guest module seckill.payments.mock: the embedded order backend charges a
// Provider, which takes no money. It is the default when the orders block names no provider; the
// gateway warns at start when it serves a listener that is not loopback.
type Module struct{}

// CaddyModule returns the Caddy module information.
func (Module) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "seckill.payments.mock", New: func() caddy.Module { return new(Module) }}
}

// OpenPayments returns a new, empty Provider.
func (Module) OpenPayments(*zap.Logger) (orderbackend.Payments, error) { return new(Provider), nil }

// TakesNoMoney marks the demo's provider, which must not face buyers.
func (Module) TakesNoMoney() bool { return true }

// UnmarshalCaddyfile reads the provider's Caddyfile syntax, inside the global seckill block's
// orders block. Syntax:
//
//	payments mock
func (m *Module) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the module name
	if d.NextArg() {
		return d.Errf("seckill: payments mock: unexpected %q: it takes no options", d.Val())
	}
	if d.NextBlock(d.Nesting()) {
		return d.Errf("seckill: payments mock: unexpected block: it takes no options")
	}
	return nil
}

var (
	_ caddy.Module          = (*Module)(nil)
	_ caddyfile.Unmarshaler = (*Module)(nil)
)
