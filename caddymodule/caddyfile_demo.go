package caddymodule

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-seckill/caddy-seckill/internal/caddyfileargs"
)

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Syntax:
//
//	seckill_demo_signin {
//		allow_remote   # answer non-loopback clients too (never in production)
//	}
func (h *DemoSignin) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // consume directive name
	if err := caddyfileargs.NoArg(d); err != nil {
		return err
	}
	return caddyfileargs.ParseBlock(d, "seckill_demo_signin", "", func(sub string) (err error) {
		switch sub {
		case "allow_remote":
			h.AllowRemote, err = true, caddyfileargs.NoArg(d)
		default:
			err = d.Errf("seckill_demo_signin: unrecognized subdirective %q", sub)
		}
		return err
	})
}
