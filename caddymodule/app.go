// Package caddymodule is the Caddy side of caddy-seckill: the app "seckill" (store, secrets,
// limits and activities shared by every site), the HTTP handler "http.handlers.seckill" that
// answers the public API, and their Caddyfile syntax.
package caddymodule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/captcha"
	"github.com/caddy-seckill/caddy-seckill/hashedurl"
	"github.com/caddy-seckill/caddy-seckill/jwtauth"
	"github.com/caddy-seckill/caddy-seckill/orderbackend"
	"github.com/caddy-seckill/caddy-seckill/ratelimit"
)

func init() {
	caddy.RegisterModule(App{})
}

// App is the seckill app: the admission store, the secrets, the rate limits and the activities
// that every seckill handler of the configuration shares. The store and the node-local rate
// limiters are pooled by configuration, so a reload that keeps them keeps the sale running.
type App struct {
	// StoreRaw is the admission store, a guest module of the namespace seckill.stores chosen by
	// its "type": memory (the default: one node, not durable), local (one node, durable in a
	// folder) or redis (any number of nodes).
	StoreRaw json.RawMessage `json:"store,omitempty" caddy:"namespace=seckill.stores inline_key=type"`

	// JWT verifies the buyers' bearer tokens; required by the seckill handler.
	JWT *JWTConfig `json:"jwt,omitempty"`

	// URLSecret keys the HMAC of the hashed buy paths. Every node of a sale needs the same one, so
	// it is required with store redis; with store memory a random secret is used when it is empty.
	// Placeholders such as {env.SECKILL_URL_SECRET} are replaced at provisioning.
	URLSecret string `json:"url_secret,omitempty"`

	// ForwardSecret keys the Seckill-Signature header of forwarded winners; required by a handler
	// with forward. It is separate from URLSecret because the shop's backend must know it.
	ForwardSecret string `json:"forward_secret,omitempty"`

	// DisableCaptcha turns the captcha off: the path call then needs no captcha answer.
	DisableCaptcha bool `json:"disable_captcha,omitempty"`

	// Captcha tunes the captcha (digits, lifetime, image fetches, issuance rate); the defaults
	// apply when it is nil. It must be nil when DisableCaptcha is set.
	Captcha *CaptchaConfig `json:"captcha,omitempty"`

	// RateLimits are the client IP and user rate limits; none unless configured.
	RateLimits *RateLimits `json:"rate_limits,omitempty"`

	// Orders, when set, runs the order backend in this process: the wins become orders in the
	// database, unpaid orders are cancelled after pay_within, and seckill_orders serves the order
	// API. Single node only.
	Orders *OrdersConfig `json:"orders,omitempty"`

	// Activities to define in the store when the app starts, by id. A definition never resets a
	// running sale: changing an activity whose window has opened fails the config load.
	Activities map[string]*ActivityConfig `json:"activities,omitempty"`

	store         StoreModule
	backend       *backend
	orders        *ordersRunner // nil without Orders
	verifier      *jwtauth.Verifier
	mint          *jwtauth.MintConfig // the token template of the HS* jwt config; nil otherwise
	issuer        *captcha.Issuer
	captchaLimit  *ratelimit.Local // per-user captcha issuance; nil when the captcha is off
	urlSecret     []byte
	urlKey        *hashedurl.Key // signs and verifies buy paths under urlSecret
	forwardSecret []byte
	ipLimit       *ratelimit.Local
	userLimit     *ratelimit.Local
	userGCRA      *ratelimit.GCRA
	acts          *activities
	metrics       *metrics
	poolKeys      []string
	logger        *zap.Logger
	run           *runner
}

// runner is the app's background work between Start and Stop.
type runner struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// CaddyModule returns the Caddy module information.
func (App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "seckill",
		New: func() caddy.Module { return new(App) },
	}
}

// Provision validates the configuration and takes the pooled store and limiters. It writes nothing
// to the store: activities are defined in Start, so that `caddy validate` has no side effects.
func (a *App) Provision(ctx caddy.Context) error {
	a.logger = ctx.Logger()
	a.run = new(runner)
	repl := caddy.NewReplacer()

	store, err := a.loadStoreModule(ctx)
	if err != nil {
		return err
	}
	a.store = store
	for id, act := range a.Activities {
		if err := act.validate(id); err != nil {
			return err
		}
		if err := act.validateStore(id, store); err != nil {
			return err
		}
	}

	if a.JWT != nil {
		var vc jwtauth.Config
		if a.verifier, vc, err = newVerifier(a.JWT, repl, a.logger.Named("jwt")); err != nil {
			return err
		}
		a.mint = mintTemplate(vc)
	}
	var orders *OrdersConfig
	if a.Orders != nil {
		if orders, err = a.Orders.resolve(repl); err != nil {
			return err
		}
	}
	a.urlSecret = []byte(repl.ReplaceKnown(a.URLSecret, ""))
	a.forwardSecret = []byte(repl.ReplaceKnown(a.ForwardSecret, ""))
	if a.URLSecret != "" && len(a.urlSecret) == 0 {
		return fmt.Errorf("url_secret %q is empty once placeholders are replaced: set the variable", a.URLSecret)
	}
	if a.ForwardSecret != "" && len(a.forwardSecret) == 0 {
		return fmt.Errorf("forward_secret %q is empty once placeholders are replaced: set the variable", a.ForwardSecret)
	}
	if n, ok := store.(URLSecretNeeder); ok && len(a.urlSecret) == 0 {
		return fmt.Errorf("url_secret is required with store %s: %s", storeName(store), n.NeedsURLSecret())
	}
	if err := a.provisionLimits(); err != nil {
		return err
	}
	captchaOpts, err := a.provisionCaptchaLimit()
	if err != nil {
		return err
	}

	b, key, err := loadBackend(store, a.logger)
	if err != nil {
		return fmt.Errorf("%s: %w", storeDirective(store), err)
	}
	a.poolKeys = append(a.poolKeys, key)
	a.backend = b
	if orders != nil {
		sync, _ := store.(DeviceSyncer)
		o, okey, err := loadOrders(ctx, key, b, orders, sync != nil && sync.SyncsToDevice(), a.logger.Named("orders"))
		if err != nil {
			return err
		}
		a.poolKeys = append(a.poolKeys, okey) // after the store's: Cleanup releases in reverse
		a.orders = o
		o.setListings(a.Activities)
	}
	if len(a.urlSecret) == 0 {
		a.urlSecret = b.secret
	}
	a.urlKey = hashedurl.NewKey(a.urlSecret)
	if a.RateLimits != nil && a.RateLimits.User != nil && a.RateLimits.User.Distributed {
		if b.gcra == nil {
			return fmt.Errorf("rate_limit user distributed needs store redis (its limit is kept in Redis); %s has none",
				storeDirective(store))
		}
		a.userGCRA = b.gcra
	}
	if !a.DisableCaptcha {
		a.issuer = captcha.NewIssuer(b.captchas, captchaOpts)
	}
	reveal := make(map[string]time.Duration, len(a.Activities))
	for id, act := range a.Activities {
		reveal[id] = time.Duration(act.Reveal)
	}
	a.acts = newActivities(b.guard, reveal)
	storeMetrics, _ := b.store.(prometheus.Collector) // a store's own metrics, if it has any
	if a.metrics, err = newMetrics(ctx.GetMetricsRegistry(), a.acts, b.guard, a.verifier, storeMetrics); err != nil {
		return err
	}
	if a.orders != nil {
		if err := registerOrdersMetrics(ctx.GetMetricsRegistry(), a.orders); err != nil {
			return err
		}
	}
	return nil
}

// provisionLimits takes the pooled local limiters of the configured rates.
func (a *App) provisionLimits() error {
	if a.RateLimits == nil {
		return nil
	}
	if c := a.RateLimits.IP; c != nil {
		if c.Distributed {
			return errors.New("rate_limit ip cannot be distributed")
		}
		r, err := c.parse()
		if err != nil {
			return fmt.Errorf("rate_limit ip: %w", err)
		}
		l, key, err := loadLimiter("ip", r)
		if err != nil {
			return err
		}
		a.poolKeys = append(a.poolKeys, key)
		a.ipLimit = l
	}
	if c := a.RateLimits.User; c != nil {
		r, err := c.parse()
		if err != nil {
			return fmt.Errorf("rate_limit user: %w", err)
		}
		l, key, err := loadLimiter("user", r)
		if err != nil {
			return err
		}
		a.poolKeys = append(a.poolKeys, key)
		a.userLimit = l
	}
	return nil
}

// provisionCaptchaLimit validates the captcha settings, takes the pooled issuance limiter and
// returns the issuer options; with the captcha off, there is nothing to issue or limit.
func (a *App) provisionCaptchaLimit() (captcha.Options, error) {
	if a.DisableCaptcha {
		if a.Captcha != nil {
			return captcha.Options{}, errors.New("captcha options are given but the captcha is off (disable_captcha): " +
				"remove one of them")
		}
		return captcha.Options{}, nil
	}
	opts, rate, err := a.Captcha.settings()
	if err != nil {
		return captcha.Options{}, err
	}
	l, key, err := loadLimiter("captcha", rate)
	if err != nil {
		return captcha.Options{}, err
	}
	a.poolKeys = append(a.poolKeys, key)
	a.captchaLimit = l
	return opts, nil
}

// newVerifier builds the JWT verifier, reading the public key files, and returns it with its
// configuration (placeholders replaced). Every error starts "jwt: ", as jwtauth.New's do.
func newVerifier(c *JWTConfig, repl *caddy.Replacer, logger *zap.Logger) (*jwtauth.Verifier, jwtauth.Config, error) {
	cfg, err := c.verifierConfig(repl)
	if err != nil {
		return nil, cfg, fmt.Errorf("jwt: %w", err)
	}
	cfg.Logger = logger
	for _, f := range c.PublicKeyFiles {
		pem, err := os.ReadFile(repl.ReplaceKnown(f, ""))
		if err != nil {
			return nil, cfg, fmt.Errorf("jwt: public_key_file: %w", err)
		}
		cfg.PublicKeyPEM = append(cfg.PublicKeyPEM, pem)
	}
	v, err := jwtauth.New(cfg)
	return v, cfg, err
}

// verifierConfig returns the verifier configuration of c with placeholders replaced, without the
// public keys (which need reading files). An hmac_secret that is empty once replaced is an error,
// never an empty secret.
func (c *JWTConfig) verifierConfig(repl *caddy.Replacer) (jwtauth.Config, error) {
	cfg := jwtauth.Config{
		Algorithms: c.Algorithms,
		JWKSURL:    repl.ReplaceKnown(c.JWKSURL, ""),
		Issuer:     repl.ReplaceKnown(c.Issuer, ""),
		Audience:   repl.ReplaceKnown(c.Audience, ""),
		Leeway:     time.Duration(c.Leeway),
		UserClaim:  c.UserClaim,

		JWKSMinRefresh: time.Duration(c.JWKSMinRefresh),
	}
	if c.HMACSecret != "" {
		secret := repl.ReplaceKnown(c.HMACSecret, "")
		if secret == "" {
			return cfg, fmt.Errorf("hmac_secret %q is empty once placeholders are replaced: set the variable", c.HMACSecret)
		}
		cfg.HMACSecret = []byte(secret)
	}
	return cfg, nil
}

// MintTemplate returns the template of the tokens c accepts, with placeholders replaced from repl,
// for the token command (package seckillcmd): as the demo sign-in mints them (mintTemplate), or
// nil when c cannot verify HMAC tokens (no hmac_secret, or no HS* algorithm).
func (c *JWTConfig) MintTemplate(repl *caddy.Replacer) (*jwtauth.MintConfig, error) {
	vc, err := c.verifierConfig(repl)
	if err != nil {
		return nil, err
	}
	return mintTemplate(vc), nil
}

// Start defines the configured activities in the store, starts the embedded order backend (once:
// a reload finds it running) and the activity refresher. A definition that would change a running
// sale fails the start, so the previous configuration stays in force.
func (a *App) Start() error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	// A reload finds the order backend running: no activity it defines anew may meet the orders
	// of a deleted sale of its id. (The first start checks after defining, below.)
	for id := range a.Activities {
		err := a.orders.refuseEarlierSale(ctx, a.backend.guard, id)
		for admission.BreakerRefused(err) && ctx.Err() == nil { // as defineActivities waits
			time.Sleep(100 * time.Millisecond)
			err = a.orders.refuseEarlierSale(ctx, a.backend.guard, id)
		}
		if err != nil {
			return err
		}
	}
	defs, err := a.defineActivities(ctx)
	if err != nil {
		return err
	}
	if a.orders != nil {
		var check func(context.Context, orderbackend.Repository) error
		if f, ok := a.store.(SaleForgetter); ok {
			check = refuseForgottenSales(storeName(a.store), f.ForgottenSaleAdvice(), a.backend.guard, defs)
		}
		if err := a.orders.start(ctx, check); err != nil {
			return err
		}
		if err := a.orders.syncStock(ctx, defs); err != nil {
			return err
		}
	}
	if err := a.acts.refresh(ctx); err != nil {
		a.logger.Warn("listing activities", zap.Error(err))
	}
	r := a.run
	r.mu.Lock()
	defer r.mu.Unlock()
	runCtx, stop := context.WithCancel(context.Background())
	r.cancel = stop
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		a.acts.refreshLoop(runCtx, a.logger)
	}()
	return nil
}

// defineActivities defines every configured activity with force off: an unchanged definition is a
// no-op and a running activity is never reset by a reload. It returns the stored definitions.
func (a *App) defineActivities(ctx context.Context) ([]admission.Activity, error) {
	defs := make([]admission.Activity, 0, len(a.Activities))
	for id, c := range a.Activities {
		def, err := a.defineActivity(ctx, id, c)
		// An open breaker refuses before trying: a reload right after the store came back (a
		// Redis restart, a store local opened again after a full disk) waits for its trial.
		for admission.BreakerRefused(err) && ctx.Err() == nil {
			time.Sleep(100 * time.Millisecond)
			def, err = a.defineActivity(ctx, id, c)
		}
		switch {
		case errors.Is(err, admission.ErrActivityRunning):
			return nil, fmt.Errorf("activity %s is running and its definition in the configuration changed: "+
				"a reload never changes a running sale; restore the definition, or change it with the "+
				"admin API (force) and then update the configuration to match", id)
		case errors.Is(err, admission.ErrStockBelowSold):
			return nil, fmt.Errorf("activity %s: stock %d is below the items already sold", id, c.Stock)
		case err != nil:
			return nil, fmt.Errorf("define activity %s: %w", id, err)
		}
		a.acts.put(def)
		defs = append(defs, def)
		a.logger.Info("activity defined", zap.String("activity", id), zap.Int64("stock", def.Stock),
			zap.Time("start", def.Start), zap.Time("end", def.End))
	}
	return defs, nil
}

// defineActivity defines one activity. With start_in, the start is the one the store already has
// (so no reload, restart or other node ever moves it), or now + start_in for a new activity; a
// second node defining it in the same instant may find it opened by the first, and takes its
// start then.
func (a *App) defineActivity(ctx context.Context, id string, c *ActivityConfig) (admission.Activity, error) {
	def := c.definition(id)
	if c.StartIn <= 0 {
		return a.backend.guard.Define(ctx, def, false)
	}
	for attempt := 0; ; attempt++ {
		snap, err := a.backend.guard.Activity(ctx, id)
		switch {
		case err == nil:
			def.Start = snap.Start
		case errors.Is(err, admission.ErrUnknownActivity):
			def.Start = startIn(time.Now(), time.Duration(c.StartIn))
		default:
			return admission.Activity{}, err
		}
		if !def.End.After(def.Start) {
			return admission.Activity{}, fmt.Errorf("end %s is not after the start %s (start_in %s)",
				def.End.Format(time.RFC3339), def.Start.Format(time.RFC3339), time.Duration(c.StartIn))
		}
		stored, err := a.backend.guard.Define(ctx, def, false)
		if errors.Is(err, admission.ErrActivityRunning) && attempt == 0 {
			continue // defined by another node since we looked: take its start
		}
		return stored, err
	}
}

// startIn is now + d, rounded up to the second, for a readable start time.
func startIn(now time.Time, d time.Duration) time.Time {
	t := now.Add(d)
	if s := t.Truncate(time.Second); s.Before(t) {
		t = s.Add(time.Second)
	}
	return t
}

// Stop stops the activity refresher. The pooled store keeps running until Cleanup releases it.
func (a *App) Stop() error {
	r := a.run
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancel != nil {
		r.cancel()
		r.wg.Wait()
		r.cancel = nil
	}
	return nil
}

// Cleanup releases the pooled values this config used, in the reverse order of taking them (the
// order backend before the store it works on); the last user destroys them.
func (a *App) Cleanup() error {
	var errs []error
	for i := len(a.poolKeys) - 1; i >= 0; i-- {
		if _, err := pool.Delete(a.poolKeys[i]); err != nil {
			errs = append(errs, err)
		}
	}
	a.poolKeys = nil
	return errors.Join(errs...)
}

// Guard returns the guarded admission store, for the admin API and the order backend.
func (a *App) Guard() *admission.Guard { return a.backend.guard }

// Interface guards
var (
	_ caddy.App          = (*App)(nil)
	_ caddy.Provisioner  = (*App)(nil)
	_ caddy.CleanerUpper = (*App)(nil)
)
