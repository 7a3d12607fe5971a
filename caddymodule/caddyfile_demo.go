package caddymodule

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("seckill_demo_signin", parseDemoDirective)
	httpcaddyfile.RegisterDirectiveOrder("seckill_demo_signin", httpcaddyfile.Before, "reverse_proxy")
}

func parseDemoDirective(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	hd := new(DemoSignin)
	err := hd.UnmarshalCaddyfile(h.Dispenser)
	return hd, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Syntax:
//
//	seckill_demo_signin {
//		allow_remote        # answer non-loopback clients too (never in production)
//	}
func (h *DemoSignin) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // consume directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch sub := d.Val(); sub {
		case "allow_remote":
			if d.NextArg() {
				return d.ArgErr()
			}
			if h.AllowRemote {
				return d.Err("seckill_demo_signin: allow_remote is given twice")
			}
			h.AllowRemote = true
		default:
			return d.Errf("seckill_demo_signin: unrecognized subdirective %q", sub)
		}
	}
	return nil
}
