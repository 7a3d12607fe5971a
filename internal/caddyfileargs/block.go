package caddyfileargs

import (
	"slices"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// OptionSet records the options met in one Caddyfile block, so that an option given twice is an
// error at the line of its second use (as caddy-ratelimit does) instead of silently replacing the
// first: `stock 1` then `stock 2` would otherwise sell 2.
type OptionSet map[string]struct{}

// once returns "seckill: <name> is given twice" with the dispenser's file:line when name was met
// before in this block, and records it otherwise. name carries the block's context (for example
// "activity a: stock") so the message says which block.
func (s OptionSet) Once(d *caddyfile.Dispenser, name string) error {
	return s.OnceIn(d, "seckill", name)
}

// OnceIn is once for the block of another directive than the seckill global option: the message
// starts with that directive ("seckill_orders: prefix is given twice").
func (s OptionSet) OnceIn(d *caddyfile.Dispenser, directive, name string) error {
	if _, dup := s[name]; dup {
		return d.Errf("%s: %s is given twice", directive, name)
	}
	s[name] = struct{}{}
	return nil
}

// ParseBlock calls parse for each option of the block that opens at the dispenser's token, after
// checking that an option not listed in repeatable is given once in the block (the error names
// it "<directive>: <prefix><option>"). parse reads the option's arguments (and nested block) and
// refuses an option it does not know.
func ParseBlock(d *caddyfile.Dispenser, directive, prefix string, parse func(opt string) error, repeatable ...string) error {
	seen := OptionSet{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		opt := d.Val()
		if !slices.Contains(repeatable, opt) {
			if err := seen.OnceIn(d, directive, prefix+opt); err != nil {
				return err
			}
		}
		if err := parse(opt); err != nil {
			return err
		}
	}
	return nil
}
