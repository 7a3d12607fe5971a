package caddymodule

import (
	"maps"
	"slices"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"

	"github.com/caddy-seckill/caddy-seckill/internal/caddyfileargs"
)

func init() {
	httpcaddyfile.RegisterGlobalOption("seckill", parseGlobalOption)
}

// parseGlobalOption sets up the seckill app from the global option of the same name. Each option
// that opens a block has its syntax once, in its parser's doc comment: store in its store
// module's UnmarshalCaddyfile (seckill.stores.memory, .local, .redis), the others in
// caddyfile_<option>.go; caddymodule/README.md renders them all (TestReference). Syntax:
//
//	seckill {
//		store          memory|local|redis ...          # the admission store; default memory
//		jwt            { ... }                         # verifies the buyers' tokens
//		url_secret     <secret>                        # keys the buy paths; required by local, redis
//		forward_secret <secret>                        # keys Seckill-Signature; required by forward
//		captcha        on|off [{ ... }]                # default on
//		orders         sqlite|postgres <file or dsn> [{ ... }]   # the order backend, in process
//		rate_limit     ip|user <events>/<period> ...   # once per kind; none by default
//		body_timeout   <duration>                      # a request body's time to arrive; default 10s
//		activity       <id> { ... }                    # once per id
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
	var (
		store   StoreModule
		storeAt caddyfile.Token
	)
	err := caddyfileargs.ParseBlock(d, "seckill", "", func(opt string) (err error) {
		switch opt {
		case "store":
			storeAt = d.Token()
			a.StoreRaw, store, err = parseStore(d)
		case "jwt":
			a.JWT, err = parseJWT(d)
		case "url_secret":
			a.URLSecret, err = caddyfileargs.SecretArg(d, "url_secret")
		case "forward_secret":
			a.ForwardSecret, err = caddyfileargs.SecretArg(d, "forward_secret")
		case "captcha":
			err = parseCaptcha(d, a)
		case "orders":
			a.Orders, err = parseOrders(d)
		case "rate_limit":
			err = parseRateLimit(d, a, rateKinds)
		case "body_timeout":
			if a.BodyTimeout, err = caddyfileargs.PositiveDurationArg(d, "body_timeout"); err == nil {
				if _, err = bodyTimeout(a.BodyTimeout); err != nil {
					err = d.Errf("seckill: %v", err)
				}
			}
		case "activity":
			err = addActivity(d, a)
		default:
			err = d.Errf("seckill: unrecognized option %q", opt)
		}
		return err
	}, "rate_limit", "activity")
	if err != nil {
		return err
	}
	// Provision checks this too (a JSON configuration); here the error points at the store line.
	if n, ok := store.(URLSecretNeeder); ok && a.URLSecret == "" {
		return caddyfileargs.ErrAt(storeAt, "seckill: store %s needs a url_secret (%s): add `url_secret "+
			"{env.SECKILL_URL_SECRET}` to the seckill block, the variable set to 32 random bytes or more",
			storeName(store), n.NeedsURLSecret())
	}
	// Provision checks this too; here the error points at the waiting_room line.
	for _, id := range slices.Sorted(maps.Keys(a.Activities)) {
		if room := a.Activities[id].WaitingRoom; room != nil && !keepsLine(store) {
			return caddyfileargs.ErrAt(room.at, "seckill: %v", room.noLine(id, store))
		}
	}
	return nil
}
