package caddymodule

import (
	"fmt"
	"math"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-seckill/caddy-seckill/internal/caddyfileargs"
	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

// parseOrders parses the orders option of the global seckill block. Syntax:
//
//	orders sqlite|postgres <file or dsn> [{
//		sweep_every    <duration>   # look for unpaid orders past pay_within; default 1s
//		settle_after   <duration>   # ask the provider about a payment left without outcome after; default 1m
//		consumer_name  <name>       # distinct per process; default the host name
//		max_deliveries <n>          # tries of a failing win before the dead letters; default 5
//		claim_idle     <duration>   # take over another consumer's wins after; default 30s
//		payments       <provider> ...  # the payment provider, with its own syntax; default mock
//		partitions     <n>          # postgres: hash partitions of orders by user; default 8 for a new database
//	}]
func parseOrders(d *caddyfile.Dispenser) (*OrdersConfig, error) {
	var typ, dsn string
	if !d.Args(&typ, &dsn) {
		return nil, d.Err("seckill: want orders sqlite <file> or orders postgres <dsn>")
	}
	if d.NextArg() {
		return nil, d.Errf("seckill: orders %s: unexpected %q (quote a DSN that has spaces)", typ, d.Val())
	}
	o := &OrdersConfig{Type: typ, DSN: dsn}
	err := caddyfileargs.ParseBlock(d, "seckill", "orders ", func(opt string) (err error) {
		switch opt {
		case "sweep_every":
			o.SweepEvery, err = caddyfileargs.PositiveDurationArg(d, "orders sweep_every")
		case "settle_after":
			o.SettleAfter, err = caddyfileargs.PositiveDurationArg(d, "orders settle_after")
		case "consumer_name":
			o.ConsumerName, err = caddyfileargs.OneArg(d)
		case "max_deliveries":
			o.MaxDeliveries, err = caddyfileargs.IntArg[int64](d, "orders max_deliveries", 1, math.MaxInt64,
				"want a whole number of at least 1")
		case "claim_idle":
			o.ClaimIdle, err = caddyfileargs.PositiveDurationArg(d, "orders claim_idle")
		case "payments":
			o.PaymentsRaw, err = parsePayments(d)
		case "partitions":
			if typ != ordersPostgres {
				return d.Errf("seckill: orders %s: partitions is a postgres option (SQLite has one table)", typ)
			}
			o.Partitions, err = caddyfileargs.IntArg(d, "orders partitions", 1, orderbackend.MaxPartitions,
				fmt.Sprintf("want a whole number from 1 (not partitioned) to %d", orderbackend.MaxPartitions))
		default:
			err = d.Errf("seckill: unrecognized orders option %q", opt)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := o.validate(); err != nil {
		return nil, d.Errf("seckill: %v", err)
	}
	return o, nil
}
