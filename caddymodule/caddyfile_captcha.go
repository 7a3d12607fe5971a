package caddymodule

import (
	"math"
	"slices"
	"strings"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-seckill/caddy-seckill/captcha"
	"github.com/caddy-seckill/caddy-seckill/internal/caddyfileargs"
)

// parseCaptcha parses the captcha option of the global seckill block into a. Syntax:
//
//	captcha off
//	captcha on [{
//		length         <digits>                        # default 5; 4 to 10
//		width          <pixels>                        # image width; default 400; 60 to 1000
//		height         <pixels>                        # image height; default 160; 20 to 400
//		audio_language en|ja|pt|ru|zh                  # spoken digits of the audio; default en
//		ttl            <duration>                      # time to answer it; default 2m; 1s to 1h
//		max_fetches    <n>                             # image and audio fetches per captcha; default 3; 1 to 100
//		issue_rate     <events>/<period> [burst <n>]   # per user and node; default 6/m burst 3
//	}]
func parseCaptcha(d *caddyfile.Dispenser, a *App) error {
	if !d.NextArg() {
		return d.Err("seckill: captcha needs on or off (e.g. captcha on { length 5 })")
	}
	v := d.Val()
	if err := caddyfileargs.NoArg(d); err != nil {
		return err
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
	err := caddyfileargs.ParseBlock(d, "seckill", "captcha ", func(opt string) (err error) {
		switch opt {
		case "length":
			c.Length, err = caddyfileargs.IntArg(d, "captcha length", 1, math.MaxInt, "want a positive whole number")
		case "width":
			c.Width, err = caddyfileargs.IntArg(d, "captcha width", 60, 1000, "want pixels from 60 to 1000")
		case "height":
			c.Height, err = caddyfileargs.IntArg(d, "captcha height", 20, 400, "want pixels from 20 to 400")
		case "audio_language":
			if c.AudioLanguage, err = caddyfileargs.OneArg(d); err == nil && !slices.Contains(captcha.AudioLanguages, c.AudioLanguage) {
				err = d.Errf("seckill: captcha audio_language %q: want one of %s", c.AudioLanguage,
					strings.Join(captcha.AudioLanguages, ", "))
			}
		case "ttl":
			c.TTL, err = caddyfileargs.PositiveDurationArg(d, "captcha ttl")
		case "max_fetches":
			c.MaxFetches, err = caddyfileargs.IntArg[int64](d, "captcha max_fetches", 1, math.MaxInt64, "want a positive whole number")
		case "issue_rate":
			c.IssueRate, err = parseRateArgs(d, "captcha issue_rate", d.RemainingArgs())
		default:
			err = d.Errf("seckill: unrecognized captcha option %q", opt)
		}
		return err
	})
	if err != nil {
		return err
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
