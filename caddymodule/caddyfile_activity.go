package caddymodule

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/internal/caddyfileargs"
	"github.com/caddy-seckill/caddy-seckill/money"
)

// addActivity parses one activity option of the global seckill block into a.Activities: its id,
// which must be new, then its block (parseActivity).
func addActivity(d *caddyfile.Dispenser, a *App) error {
	if !d.NextArg() {
		return d.ArgErr()
	}
	id := d.Val()
	if !admission.ValidActivityID(id) {
		return d.Errf("seckill: activity id %q: want 1-%d of [A-Za-z0-9._-]", id, admission.MaxActivityIDLen)
	}
	if _, dup := a.Activities[id]; dup {
		return d.Errf("seckill: activity %s is defined twice", id)
	}
	if err := caddyfileargs.NoArg(d); err != nil {
		return err
	}
	act, err := parseActivity(d, id)
	if err != nil {
		return err
	}
	if a.Activities == nil {
		a.Activities = map[string]*ActivityConfig{}
	}
	a.Activities[id] = act
	return nil
}

// parseActivity parses the block of "activity <id>". Syntax:
//
//	activity <id> {
//		stock      <n>                   # required
//		limit      <n>                   # most items per user; default 1
//		start      <RFC 3339 time>       # required, or start_in
//		start_in   <duration>            # instead of start: after the first definition
//		end        <RFC 3339 time>       # required
//		reveal     <duration>            # buy path handed out this long before start; default 0
//		pay_within <duration>            # time a winner has to pay; default 15m
//		buckets    <n>                   # store redis: split the stock over n shards; 2 to 256, ≤ stock
//		price      <amount> <currency>   # one item's price, e.g. 199.00 USD (ISO 4217); optional
//		title      <text>                # the item's name on the sale page and in orders; optional
//		waiting_room { ... }             # a line in front of the buy step (its block: waiting_room)
//	}
func parseActivity(d *caddyfile.Dispenser, id string) (*ActivityConfig, error) {
	c := new(ActivityConfig)
	what := "activity " + id + ": "
	haveStock := false
	var endAt caddyfile.Token // an end not after the start is this line's error
	err := caddyfileargs.ParseBlock(d, "seckill", what, func(opt string) (err error) {
		switch opt {
		case "stock":
			c.Stock, err = caddyfileargs.IntArg[int64](d, what+"stock", 0, math.MaxInt64, "want a whole number")
			haveStock = true
		case "limit":
			c.Limit, err = caddyfileargs.IntArg[int64](d, what+"limit", 0, math.MaxInt64, "want a whole number")
			if err == nil && c.Limit == 0 {
				err = d.Errf("seckill: %slimit must be at least 1", what)
			}
		case "start":
			c.Start, err = caddyfileargs.TimeArg(d, what+"start")
		case "start_in":
			c.StartIn, err = caddyfileargs.DurationArg(d, what+"start_in")
			if err == nil && c.StartIn == 0 {
				err = d.Errf("seckill: %sstart_in must be positive (for a sale open at once, give a start in the past)", what)
			}
		case "end":
			endAt = d.Token()
			c.End, err = caddyfileargs.TimeArg(d, what+"end")
		case "reveal":
			c.Reveal, err = caddyfileargs.DurationArg(d, what+"reveal")
		case "pay_within":
			c.PayWithin, err = caddyfileargs.DurationArg(d, what+"pay_within")
		case "buckets":
			// The stock bound is checked once the block is read (validate).
			c.Buckets, err = caddyfileargs.IntArg(d, what+"buckets", minBuckets, admission.MaxBuckets,
				fmt.Sprintf("want %d to %d (leave it out for one)", minBuckets, admission.MaxBuckets))
		case "price":
			c.Price, err = parsePrice(d, what)
		case "title":
			if c.Title, err = caddyfileargs.OneArg(d); err == nil {
				if err = validateTitle(c.Title); err == nil && strings.TrimSpace(c.Title) == "" {
					err = errors.New("is empty")
				}
				if err != nil {
					err = d.Errf("seckill: %stitle %q: %v", what, c.Title, err)
				}
			}
		case "waiting_room":
			c.WaitingRoom, err = parseWaitingRoom(d, what)
		default:
			err = d.Errf("seckill: %sunrecognized option %q", what, opt)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if !haveStock {
		return nil, d.Errf("seckill: %sstock is required", what)
	}
	if err := c.validate(id); err != nil {
		if errors.As(err, new(endNotAfterStart)) {
			return nil, caddyfileargs.ErrAt(endAt, "seckill: %v", err)
		}
		return nil, d.Errf("seckill: %v", err)
	}
	return c, nil
}

// parsePrice reads the two arguments of "price <amount> <currency>": a positive decimal amount
// with at most the currency's minor-unit digits.
func parsePrice(d *caddyfile.Dispenser, what string) (*money.Price, error) {
	var amount, currency string
	if !d.AllArgs(&amount, &currency) {
		return nil, d.Errf("seckill: %sprice needs an amount and an ISO 4217 currency, e.g. price 199.00 USD", what)
	}
	p, err := money.Parse(amount, currency)
	if err == nil && p.Amount == 0 {
		err = errors.New("must be more than zero")
	}
	if err != nil {
		return nil, d.Errf("seckill: %sprice %s %s: %v", what, amount, currency, err)
	}
	return &p, nil
}
