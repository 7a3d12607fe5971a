package caddymodule

import (
	"strconv"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-seckill/caddy-seckill/internal/caddyfileargs"
)

// parseRateLimit parses the rate_limit option of the global seckill block into a, once per kind
// (seen is the global block's caddyfileargs.OptionSet). Syntax:
//
//	rate_limit ip   <events>/<period> [burst <n>]                 # node-local; IPv6 by /64
//	rate_limit user <events>/<period> [burst <n>] [distributed]   # distributed: in Redis too
func parseRateLimit(d *caddyfile.Dispenser, a *App, seen caddyfileargs.OptionSet) error {
	args := d.RemainingArgs()
	if len(args) < 2 {
		return d.Err("seckill: want rate_limit ip|user <events>/<period> [burst <n>] [distributed]")
	}
	kind := args[0]
	if kind != "ip" && kind != "user" {
		return d.Errf("seckill: rate_limit %q: want ip or user", kind)
	}
	if err := seen.Once(d, "rate_limit "+kind); err != nil {
		return err
	}
	c, err := parseRateArgs(d, "rate_limit", args[1:])
	if err != nil {
		return err
	}
	if _, err := c.parse(); err != nil {
		return d.Errf("seckill: rate_limit %s: %v", kind, err)
	}
	if a.RateLimits == nil {
		a.RateLimits = new(RateLimits)
	}
	if kind == "user" {
		a.RateLimits.User = c
		return nil
	}
	if c.Distributed {
		return d.Err("seckill: rate_limit ip cannot be distributed (the IP limit is node-local by design)")
	}
	a.RateLimits.IP = c
	return nil
}

// parseRateArgs reads "<events>/<period> [burst <n>] [distributed]" from args, for the option
// named what.
func parseRateArgs(d *caddyfile.Dispenser, what string, args []string) (*RateLimitConfig, error) {
	if len(args) == 0 {
		return nil, d.Errf("seckill: %s needs a rate like 6/m", what)
	}
	c := &RateLimitConfig{Rate: args[0]}
	for i := 1; i < len(args); i++ {
		switch args[i] {
		case "burst":
			if i+1 >= len(args) {
				return nil, d.Errf("seckill: %s burst needs a number", what)
			}
			n, err := strconv.Atoi(args[i+1])
			if err != nil || n <= 0 {
				return nil, d.Errf("seckill: %s burst %q: want a positive whole number", what, args[i+1])
			}
			c.Burst = n
			i++
		case "distributed":
			c.Distributed = true
		default:
			return nil, d.Errf("seckill: %s: unexpected %q", what, args[i])
		}
	}
	return c, nil
}
