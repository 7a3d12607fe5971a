package caddymodule

import (
	"errors"
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-seckill/caddy-seckill/captcha"
	"github.com/caddy-seckill/caddy-seckill/ratelimit"
)

// CaptchaConfig tunes the captcha of the path call. Zero fields take their defaults.
type CaptchaConfig struct {
	// Length is the number of digits; default 5, from 4 to 10.
	Length int `json:"length,omitempty"`

	// Width and Height are the image's size in pixels; default 400×160, width from 60 to 1000,
	// height from 20 to 400. The page scales the image down to fit a phone.
	Width  int `json:"width,omitempty"`
	Height int `json:"height,omitempty"`

	// AudioLanguage is the language of the audio alternative's spoken digits: en (default), ja,
	// pt, ru or zh.
	AudioLanguage string `json:"audio_language,omitempty"`

	// TTL is how long an issued captcha may be answered; default 2m, from 1s to 1h.
	TTL caddy.Duration `json:"ttl,omitempty"`

	// MaxFetches is how often one captcha's image and audio, together, may be fetched; default 3,
	// from 1 to 100.
	MaxFetches int64 `json:"max_fetches,omitempty"`

	// IssueRate limits how many captchas one user is issued, per node; default 6/m burst 3 (a
	// rate without a burst has a burst of its number of events, as in rate_limits). It
	// always applies, with or without a user rate limit: rendering a captcha costs milliseconds of
	// CPU, so unlimited issuance would let one token burn the node's cores.
	IssueRate *RateLimitConfig `json:"issue_rate,omitempty"`
}

// defaultCaptchaIssueRate lets a buyer load the page and ask for two more images at once, then
// one every 10 s: a human needs seconds to read and type the digits, so a buyer never waits on it,
// while one token costs a node at most 6 renders (about 30 ms of CPU) a minute.
var defaultCaptchaIssueRate = ratelimit.Rate{Events: 6, Period: time.Minute, Burst: 3}

// settings returns the issuer options and the issuance rate c describes, validated. A nil c is
// every default.
func (c *CaptchaConfig) settings() (captcha.Options, ratelimit.Rate, error) {
	if c == nil {
		return captcha.Options{}, defaultCaptchaIssueRate, nil
	}
	// Validate fills only zero fields with defaults, so a negative value is reported with its range.
	opts := captcha.Options{
		Length: c.Length, Width: c.Width, Height: c.Height, AudioLanguage: c.AudioLanguage,
		TTL: time.Duration(c.TTL), MaxFetches: c.MaxFetches,
	}
	if err := opts.Validate(); err != nil {
		return captcha.Options{}, ratelimit.Rate{}, err
	}
	rate := defaultCaptchaIssueRate
	if r := c.IssueRate; r != nil {
		if r.Distributed {
			return captcha.Options{}, ratelimit.Rate{}, errors.New("captcha issue_rate is node-local and cannot be " +
				"distributed (rate_limit user ... distributed also bounds captcha calls across nodes)")
		}
		var err error
		if rate, err = r.parse(); err != nil {
			return captcha.Options{}, ratelimit.Rate{}, fmt.Errorf("captcha issue_rate: %w", err)
		}
	}
	return opts, rate, nil
}
