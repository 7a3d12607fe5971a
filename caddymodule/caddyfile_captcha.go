package caddymodule

import (
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// parseCaptcha parses "captcha on|off [{ ... }]" into a. Syntax:
//
//	captcha on {
//		length      <digits>
//		ttl         <duration>
//		max_fetches <n>
//		issue_rate  <events>/<period> [burst <n>]
//	}
func parseCaptcha(d *caddyfile.Dispenser, a *App) error {
	if !d.NextArg() {
		return d.Err("seckill: captcha needs on or off (e.g. captcha on { length 6 })")
	}
	v := d.Val()
	if d.NextArg() {
		return d.ArgErr()
	}
	switch v {
	case "on":
		a.DisableCaptcha = false
	case "off":
		a.DisableCaptcha = true
		if d.NextBlock(d.Nesting()) {
			return d.Errf("seckill: captcha off takes no options (found %q)", d.Val())
		}
		return nil
	default:
		return d.Errf("seckill: captcha %q: want on or off", v)
	}
	c := new(CaptchaConfig)
	seen := optionSet{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		sub := d.Val()
		if err := seen.once(d, "captcha "+sub); err != nil {
			return err
		}
		switch sub {
		case "length", "max_fetches":
			var arg string
			if !d.AllArgs(&arg) {
				return d.ArgErr()
			}
			n, err := strconv.Atoi(arg)
			if err != nil || n <= 0 {
				return d.Errf("seckill: captcha %s %q: want a positive whole number", sub, arg)
			}
			if sub == "length" {
				c.Length = n
			} else {
				c.MaxFetches = int64(n)
			}
		case "ttl":
			dur, err := durationArg(d, "captcha ttl")
			if err != nil {
				return err
			}
			if dur == 0 {
				return d.Err("seckill: captcha ttl must be positive")
			}
			c.TTL = caddy.Duration(dur)
		case "issue_rate":
			r, err := parseRateArgs(d, "captcha issue_rate", d.RemainingArgs())
			if err != nil {
				return err
			}
			c.IssueRate = r
		default:
			return d.Errf("seckill: unrecognized captcha option %q", sub)
		}
	}
	if *c == (CaptchaConfig{}) {
		return nil // "captcha on {}": every default
	}
	if _, _, err := c.settings(); err != nil {
		return d.Errf("seckill: %v", err)
	}
	a.Captcha = c
	return nil
}
