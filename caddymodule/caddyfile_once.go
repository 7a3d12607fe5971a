package caddymodule

import "github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

// optionSet records the options met in one Caddyfile block, so that an option given twice is an
// error at the line of its second use (as caddy-ratelimit does) instead of silently replacing the
// first: `stock 1` then `stock 2` would otherwise sell 2.
type optionSet map[string]struct{}

// once returns "seckill: <name> is given twice" with the dispenser's file:line when name was met
// before in this block, and records it otherwise. name carries the block's context (for example
// "activity a: stock") so the message says which block.
func (s optionSet) once(d *caddyfile.Dispenser, name string) error {
	if _, dup := s[name]; dup {
		return d.Errf("seckill: %s is given twice", name)
	}
	s[name] = struct{}{}
	return nil
}
