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
	seen := optionSet{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		sub := d.Val()
		if err := seen.once(d, sub); err != nil {
			return err
		}
		if ok, err := parseMountSubdirective(d, "seckill", &h.Prefix, &h.Errors); ok {
			if err != nil {
				return err
			}
			continue
		}
		switch sub {
		case "forward":
			if d.NextArg() {
				return d.ArgErr()
			}
			h.Forward = true
		default:
			return d.Errf("seckill: unrecognized subdirective %q", sub)
		}
	}
	return nil
}

// parseMountSubdirective parses the subdirectives every handler of this plugin shares, prefix and
// errors, at the dispenser's current token. It reports whether the token was one of them.
func parseMountSubdirective(d *caddyfile.Dispenser, directive string, prefix, errorsMode *string) (bool, error) {
	switch d.Val() {
	case "prefix":
		if !d.AllArgs(prefix) {
			return true, d.ArgErr()
		}
		if *prefix == "" || (*prefix)[0] != '/' {
			return true, d.Errf("%s: prefix %q must start with /", directive, *prefix)
		}
		return true, nil
	case "errors":
		if !d.AllArgs(errorsMode) {
			return true, d.ArgErr()
		}
		if err := validErrorsMode(*errorsMode); err != nil {
			return true, d.Errf("%s: %v", directive, err)
		}
		return true, nil
	}
	return false, nil
}
