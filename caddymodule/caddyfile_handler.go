package caddymodule

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/caddy-seckill/caddy-seckill/internal/caddyfileargs"
)

func init() {
	registerDirective[Handler]("seckill")
	registerDirective[OrdersHandler]("seckill_orders")
	registerDirective[DemoSignin]("seckill_demo_signin")
}

// registerDirective registers the handler directive name, parsed by the handler's
// UnmarshalCaddyfile. It is ordered before reverse_proxy, so that "seckill { forward }" followed by
// reverse_proxy works in a site block without a route; inside route blocks the written order
// applies anyway.
func registerDirective[T any, P interface {
	*T
	caddyhttp.MiddlewareHandler
	caddyfile.Unmarshaler
}](name string) {
	httpcaddyfile.RegisterHandlerDirective(name, func(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
		hd := P(new(T))
		err := hd.UnmarshalCaddyfile(h.Dispenser)
		return hd, err
	})
	httpcaddyfile.RegisterDirectiveOrder(name, httpcaddyfile.Before, "reverse_proxy")
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Syntax:
//
//	seckill {
//		prefix  <path>              # default /seckill: the calls are <path>/<activity>[/...]
//		forward                     # pass winners on to the next handler, signed
//		errors  auto|write|return   # default auto: JSON body unless handle_errors routes exist
//	}
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return parseMount(d, "seckill", &h.Prefix, &h.Errors, func(sub string) (bool, error) {
		switch sub {
		case "forward":
			h.Forward = true
			return true, caddyfileargs.NoArg(d)
		}
		return false, nil
	})
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Syntax:
//
//	seckill_orders {
//		prefix <path>              # default /orders: the calls are <path>/<order id>[/pay|/cancel]
//		errors auto|write|return   # as for seckill
//	}
func (h *OrdersHandler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return parseMount(d, "seckill_orders", &h.Prefix, &h.Errors, nil)
}

// parseMount parses the block of a handler directive mounted under a prefix (seckill,
// seckill_orders): no arguments, each subdirective at most once, prefix and errors shared by all;
// any other subdirective goes to more (when not nil), which reports whether it knows it.
func parseMount(d *caddyfile.Dispenser, directive string, prefix, errorsMode *string,
	more func(sub string) (bool, error),
) error {
	d.Next() // consume directive name
	if err := caddyfileargs.NoArg(d); err != nil {
		return err
	}
	return caddyfileargs.ParseBlock(d, directive, "", func(sub string) (err error) {
		switch sub {
		case "prefix":
			*prefix, err = caddyfileargs.OneArg(d)
			if err == nil && (*prefix == "" || (*prefix)[0] != '/') {
				err = d.Errf("%s: prefix %q must start with /", directive, *prefix)
			}
		case "errors":
			*errorsMode, err = caddyfileargs.OneArg(d)
			if err == nil {
				if bad := validErrorsMode(*errorsMode); bad != nil {
					err = d.Errf("%s: %v", directive, bad)
				}
			}
		default:
			known := false
			if more != nil {
				known, err = more(sub)
			}
			if !known {
				err = d.Errf("%s: unrecognized subdirective %q", directive, sub)
			}
		}
		return err
	})
}
