// Package caddyfileargs reads the arguments and blocks of seckill's Caddyfile options, so that
// each `case` of a block parser is one assignment, as in Caddy's reverseproxy/caddyfile.go. Every
// error carries the Caddyfile's file:line and names the option; an option given twice in one block
// is an error (as caddy-ratelimit has it), not a silent replacement.
package caddyfileargs

import (
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// NoArg checks that a flag option (e.g. "cluster") has no argument.
func NoArg(d *caddyfile.Dispenser) error {
	if d.NextArg() {
		return d.ArgErr()
	}
	return nil
}

// OneArg reads the one argument of the option.
func OneArg(d *caddyfile.Dispenser) (string, error) {
	var v string
	if !d.AllArgs(&v) {
		return "", d.ArgErr()
	}
	return v, nil
}

// SomeArgs reads the one or more arguments of a list option (e.g. "algorithms HS256 RS256").
func SomeArgs(d *caddyfile.Dispenser) ([]string, error) {
	args := d.RemainingArgs()
	if len(args) == 0 {
		return nil, d.ArgErr()
	}
	return args, nil
}

// AppendArgs appends the one or more arguments of a repeatable list option (e.g. "address a:1
// b:2") to list.
func AppendArgs(d *caddyfile.Dispenser, list *[]string) error {
	args, err := SomeArgs(d)
	*list = append(*list, args...)
	return err
}

// IntArg reads one whole-number argument between lo and hi; outside, or not a number, the error
// is "seckill: <what> "<arg>": <want>".
func IntArg[T int | int64](d *caddyfile.Dispenser, what string, lo, hi T, want string) (T, error) {
	v, err := OneArg(d)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < int64(lo) || n > int64(hi) {
		return 0, d.Errf("seckill: %s %q: %s", what, v, want)
	}
	return T(n), nil
}

// DurationArg reads one non-negative duration argument.
func DurationArg(d *caddyfile.Dispenser, what string) (caddy.Duration, error) {
	v, err := OneArg(d)
	if err != nil {
		return 0, err
	}
	dur, err := caddy.ParseDuration(v)
	if err != nil {
		return 0, d.Errf("seckill: %s %q: %v", what, v, err)
	}
	if dur < 0 {
		return 0, d.Errf("seckill: %s %q is negative", what, v)
	}
	return caddy.Duration(dur), nil
}

// PositiveDurationArg reads one duration argument that must be above zero (a period, a timeout).
func PositiveDurationArg(d *caddyfile.Dispenser, what string) (caddy.Duration, error) {
	dur, err := DurationArg(d, what)
	if err == nil && dur == 0 {
		return 0, d.Errf("seckill: %s must be positive", what)
	}
	return dur, err
}

// TimeArg reads one RFC 3339 time argument.
func TimeArg(d *caddyfile.Dispenser, what string) (time.Time, error) {
	v, err := OneArg(d)
	if err != nil {
		return time.Time{}, err
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, d.Errf("seckill: %s %q: want an RFC 3339 time like 2026-12-01T20:00:00+08:00", what, v)
	}
	return t, nil
}

// SecretArg reads the one argument of a secret option (what: url_secret, jwt hmac_secret). A
// secret from an environment variable read while parsing ({$VAR}) that is unset or empty leaves
// no argument: the error says so rather than "wrong argument count".
func SecretArg(d *caddyfile.Dispenser, what string) (string, error) {
	args := d.RemainingArgs()
	switch {
	case len(args) == 0:
		opt := what[strings.LastIndexByte(what, ' ')+1:]
		return "", d.Errf("seckill: %s has no value: give it one, e.g. %s {env.VAR} (read at start), or set the "+
			"variable of a {$VAR} (read here, and empty or unset)", what, opt)
	case len(args) > 1:
		return "", d.ArgErr()
	}
	return args[0], nil
}

// ErrAt is d.Errf at an earlier token of d (from d.Token()), for an error found once a block is
// read that belongs to one of its lines: the message names that line, not the closing brace.
func ErrAt(tok caddyfile.Token, format string, args ...any) error {
	d := caddyfile.NewDispenser([]caddyfile.Token{tok})
	d.Next()
	return d.Errf(format, args...)
}
