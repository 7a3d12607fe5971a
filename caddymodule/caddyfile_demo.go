package caddymodule

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-seckill/caddy-seckill/internal/caddyfileargs"
)

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Syntax:
//
//	seckill_demo_signin {
//		allow loopback|private|any|<CIDR>...   # who may sign in; default loopback (never in production)
//	}
func (h *DemoSignin) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // consume directive name
	if err := caddyfileargs.NoArg(d); err != nil {
		return err
	}
	return caddyfileargs.ParseBlock(d, "seckill_demo_signin", "", func(sub string) (err error) {
		switch sub {
		case "allow":
			if h.Allow, err = caddyfileargs.SomeArgs(d); err == nil {
				if err = (&DemoSignin{Allow: h.Allow}).parseAllow(); err != nil {
					err = d.Err(err.Error())
				}
			}
		default:
			err = d.Errf("seckill_demo_signin: unrecognized subdirective %q", sub)
		}
		return err
	})
}
