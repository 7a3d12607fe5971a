package caddymodule

import (
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"

	"github.com/caddy-seckill/caddy-seckill/internal/caddyfileargs"
)

func init() {
	httpcaddyfile.RegisterGlobalOption("seckill", parseGlobalOption)
}

// parseGlobalOption sets up the seckill app from the global option of the same name. Each block
// has its parser in caddyfile_<block>.go, with its syntax in the doc comment. Syntax:
//
//	seckill {
//		store memory
//		store local <dir> {
//			fsync always|no
//		}
//		store redis [<address>...] {
//			address    <host:port>...
//			username   <name>
//			password   <password>
//			db         <n>
//			key_prefix <prefix>
//			sentinel   <master name>
//			cluster
//			auto_pipeline
//			admit_batch <n>
//			pool_size   <n>
//			replicas_ack <n> [<timeout>]
//		}
//		jwt {
//			algorithms      <alg>...
//			hmac_secret     <secret>
//			public_key_file <pem file>
//			jwks_url        <url>
//			jwks_min_refresh <duration>
//			issuer          <iss>
//			audience        <aud>
//			leeway          <duration>
//			user_claim      <claim>
//		}
//		url_secret     <secret>
//		forward_secret <secret>
//		captcha        on|off [{
//			length      <digits>
//			ttl         <duration>
//			max_fetches <n>
//			issue_rate  <events>/<period> [burst <n>]
//		}]
//		orders sqlite|postgres <file or dsn> {
//			sweep_every    <duration>
//			consumer_name  <name>
//			max_deliveries <n>
//			claim_idle     <duration>
//		}
//		rate_limit ip   <events>/<period> [burst <n>]
//		rate_limit user <events>/<period> [burst <n>] [distributed]
//		activity <id> {
//			stock      <n>
//			limit      <n>
//			start      <RFC 3339 time>
//			start_in   <duration>       # instead of start: after the first definition
//			end        <RFC 3339 time>
//			reveal     <duration>
//			pay_within <duration>
//			buckets    <n>              # store redis: split the stock over n shards (2-256)
//		}
//	}
func parseGlobalOption(d *caddyfile.Dispenser, existing any) (any, error) {
	if existing != nil {
		d.Next()
		return nil, d.Err("seckill: the global option is given twice: merge the blocks")
	}
	app := new(App)
	if err := app.UnmarshalCaddyfile(d); err != nil {
		return nil, err
	}
	return httpcaddyfile.App{
		Name:  "seckill",
		Value: caddyconfig.JSON(app, nil),
	}, nil
}

// UnmarshalCaddyfile sets up the app from Caddyfile tokens; see parseGlobalOption for the syntax.
// Every option but rate_limit (once per kind) and activity (once per id) may be given once.
func (a *App) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // consume option name
	if err := caddyfileargs.NoArg(d); err != nil {
		return err
	}
	rateKinds := caddyfileargs.OptionSet{}
	return caddyfileargs.ParseBlock(d, "seckill", "", func(opt string) (err error) {
		switch opt {
		case "store":
			a.Store, err = parseStore(d)
		case "jwt":
			a.JWT, err = parseJWT(d)
		case "url_secret":
			a.URLSecret, err = caddyfileargs.OneArg(d)
		case "forward_secret":
			a.ForwardSecret, err = caddyfileargs.OneArg(d)
		case "captcha":
			err = parseCaptcha(d, a)
		case "orders":
			a.Orders, err = parseOrders(d)
		case "rate_limit":
			err = parseRateLimit(d, a, rateKinds)
		case "activity":
			err = addActivity(d, a)
		default:
			err = d.Errf("seckill: unrecognized option %q", opt)
		}
		return err
	}, "rate_limit", "activity")
}
