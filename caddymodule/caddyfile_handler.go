package caddymodule

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("seckill", parseHandlerDirective)
	// Before reverse_proxy, so that "seckill { forward }" followed by reverse_proxy works in a site
	// block without a route; inside route blocks the written order applies anyway.
	httpcaddyfile.RegisterDirectiveOrder("seckill", httpcaddyfile.Before, "reverse_proxy")
}

func parseHandlerDirective(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	hd := new(Handler)
	err := hd.UnmarshalCaddyfile(h.Dispenser)
	return hd, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Syntax:
//
//	seckill {
//		prefix  <path>          # default /seckill
//		forward                 # pass winners on to the next handler, signed
//		errors  auto|write|return
//	}
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // consume directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	seen := map[string]bool{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		sub := d.Val()
		if seen[sub] {
			return d.Errf("seckill: %s is given twice", sub)
		}
		seen[sub] = true
		switch sub {
		case "prefix":
			if !d.AllArgs(&h.Prefix) {
				return d.ArgErr()
			}
			if h.Prefix == "" || h.Prefix[0] != '/' {
				return d.Errf("seckill: prefix %q must start with /", h.Prefix)
			}
		case "forward":
			if d.NextArg() {
				return d.ArgErr()
			}
			h.Forward = true
		case "errors":
			if !d.AllArgs(&h.Errors) {
				return d.ArgErr()
			}
			switch h.Errors {
			case errorsAuto, errorsWrite, errorsReturn:
			default:
				return d.Errf("seckill: errors %q: want auto, write or return", h.Errors)
			}
		default:
			return d.Errf("seckill: unrecognized subdirective %q", sub)
		}
	}
	return nil
}
