package caddymodule

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("seckill_orders", parseOrdersDirective)
	httpcaddyfile.RegisterDirectiveOrder("seckill_orders", httpcaddyfile.Before, "reverse_proxy")
}

func parseOrdersDirective(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	hd := new(OrdersHandler)
	err := hd.UnmarshalCaddyfile(h.Dispenser)
	return hd, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Syntax:
//
//	seckill_orders {
//		prefix <path>             # default /orders
//		errors auto|write|return
//	}
func (h *OrdersHandler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // consume directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	seen := map[string]bool{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		sub := d.Val()
		if seen[sub] {
			return d.Errf("seckill_orders: %s is given twice", sub)
		}
		seen[sub] = true
		if ok, err := parseMountSubdirective(d, "seckill_orders", &h.Prefix, &h.Errors); ok {
			if err != nil {
				return err
			}
			continue
		}
		return d.Errf("seckill_orders: unrecognized subdirective %q", sub)
	}
	return nil
}
