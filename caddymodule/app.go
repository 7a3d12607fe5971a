// Package caddymodule is the Caddy side of caddy-seckill: the app "seckill" (store, secrets,
// limits and activities shared by every site), the HTTP handler "http.handlers.seckill" that
// answers the public API, and their Caddyfile syntax.
package caddymodule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/captcha"
	"github.com/caddy-seckill/caddy-seckill/hashedurl"
	"github.com/caddy-seckill/caddy-seckill/jwtauth"
	"github.com/caddy-seckill/caddy-seckill/ratelimit"
	"github.com/caddy-seckill/caddy-seckill/waitroom"
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

	// BodyTimeout is how long a request body to the seckill and seckill_orders handlers may take to
	// arrive, from the handler's start: a body still arriving then is answered 408 and its
	// connection closed. Default 10s; 1s to 10m.
	BodyTimeout caddy.Duration `json:"body_timeout,omitempty"`

	// Activities to define in the store when the app starts, by id. A definition never resets a
	// running sale: changing an activity whose window has opened fails the config load.
	Activities map[string]*ActivityConfig `json:"activities,omitempty"`

	store         StoreModule
	ordersCfg     *OrdersConfig // Orders with placeholders replaced
	captchaOpts   captcha.Options
	registry      *prometheus.Registry // the configuration's, for the metrics registered at Start
	backend       *backend             // this and what follows, to run, are set at Start (open)
	backendKey    string               // the backend's pool key
	inForce       *inForce             // the process's record of the store in force
	inForceGen    uint64               // the generation of this configuration's entry in inForce
	inForcePrev   storeInForce         // the entry it replaced, put back if Caddy rolls back
	listings      listingsSwap         // the order backend's listings this Start set, for Stop
	orders        *ordersRunner        // nil without Orders
	verifier      *jwtauth.Verifier
	mint          *jwtauth.MintConfig // the token template of the HS* jwt config; nil otherwise
	issuer        *captcha.Issuer
	captchaLimit  *ratelimit.Local // per-user captcha issuance; nil when the captcha is off
	urlSecret     []byte
	urlKey        *hashedurl.Key // signs and verifies buy paths under urlSecret
	forwardSecret []byte
	bodyTimeout   time.Duration
	ipLimit       *ratelimit.Local
	userLimit     *ratelimit.Local
	userGCRA      *ratelimit.GCRA
	acts          *activities
	rooms         map[string]*waitroom.Room // activity id -> its waiting room (queue.go)
	line          waitroom.Line             // the store's line; nil when it keeps none
	spender       powSpender                // the store's spent proofs of work; nil when it keeps none
	roomMetrics   *roomMetrics
	metrics       *metrics
	poolKeys      []string
	logger        *zap.Logger
	run           *runner
	ctx           caddy.Context
	fallback      []string             // the secrets that are try-out fallbacks (fallbackSecrets)
	fallbackGauge *prometheus.GaugeVec // caddy_seckill_fallback_secret
	payments      PaymentsModule       // the orders block's provider, loaded at Provision
}

// runner is the app's life after Provision: the opening of the store at Start, which the handlers
// wait for, and the background work between Start and Stop.
type runner struct {
	provisioned bool // Provision succeeded

	opened   chan struct{} // closed once Start has opened the store, or failed to
	openErr  error
	openOnce sync.Once

	mu      sync.Mutex
	started bool // Start was called
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// CaddyModule returns the Caddy module information.
func (App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "seckill",
		New: func() caddy.Module { return new(App) },
	}
}

// Provision validates the configuration and takes the pooled limiters. It opens nothing and
// writes nothing: `caddy validate` provisions a configuration and then stops it, while the gateway
// may be running on the same store (a store local folder is one process's; a Redis may be out of
// reach from where validate runs). Start opens the store and the order backend (open).
func (a *App) Provision(ctx caddy.Context) error {
	a.logger = ctx.Logger()
	a.run = &runner{opened: make(chan struct{})}
	a.registry = ctx.GetMetricsRegistry()
	a.ctx = ctx
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

	var jwtSecret []byte
	if a.JWT != nil {
		var vc jwtauth.Config
		if a.verifier, vc, err = newVerifier(a.JWT, repl, a.logger.Named("jwt")); err != nil {
			return err
		}
		a.mint = mintTemplate(vc)
		jwtSecret = vc.HMACSecret
	}
	if a.Orders != nil {
		if a.ordersCfg, err = a.Orders.resolve(repl); err != nil {
			return err
		}
		if a.payments, err = loadPaymentsModule(ctx, a.ordersCfg); err != nil {
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
	a.fallback = fallbackSecrets(jwtSecret, a.urlSecret, a.forwardSecret)
	if n, ok := store.(URLSecretNeeder); ok && len(a.urlSecret) == 0 {
		return fmt.Errorf("url_secret is required with store %s: %s", storeName(store), n.NeedsURLSecret())
	}
	if a.bodyTimeout, err = bodyTimeout(a.BodyTimeout); err != nil {
		return err
	}
	if a.RateLimits != nil && a.RateLimits.User != nil && a.RateLimits.User.Distributed {
		if _, ok := store.(RedisBacked); !ok {
			return fmt.Errorf("rate_limit user distributed needs store redis (its limit is kept in Redis); %s has none",
				storeDirective(store))
		}
	}
	if err := a.provisionLimits(); err != nil {
		return err
	}
	if a.captchaOpts, err = a.provisionCaptchaLimit(); err != nil {
		return err
	}
	a.run.provisioned = true
	return nil
}

// open opens the pooled store (a reload finds it open) with the order backend's runner over it,
// and builds what the handlers serve from. Start calls it first; see Provision for why not there.
func (a *App) open() error {
	store := a.store
	rec, rkey, err := loadInForce()
	if err != nil {
		return err
	}
	a.poolKeys = append(a.poolKeys, rkey)
	a.inForce = rec
	b, key, err := loadBackend(store, a.logger)
	if err != nil {
		return fmt.Errorf("%s: %w", storeDirective(store), err)
	}
	a.poolKeys = append(a.poolKeys, key)
	a.backend, a.backendKey = b, key
	if a.ordersCfg != nil {
		sync, _ := store.(DeviceSyncer)
		o, okey, err := loadOrders(a.ctx, key, b, a.ordersCfg, a.payments, sync != nil && sync.SyncsToDevice(), a.logger.Named("orders"))
		if err != nil {
			return err
		}
		a.poolKeys = append(a.poolKeys, okey) // after the store's: Cleanup releases in reverse
		a.orders = o
		// Its listings (prices, titles) are set by Start: a reload finds the runner serving the
		// configuration in force, which a refused reload must leave as it was.
	}
	if len(a.urlSecret) == 0 {
		a.urlSecret = b.secret
	}
	a.urlKey = hashedurl.NewKey(a.urlSecret)
	if a.RateLimits != nil && a.RateLimits.User != nil && a.RateLimits.User.Distributed {
		if b.gcra == nil {
			return fmt.Errorf("rate_limit user distributed: %s opened no Redis store", storeDirective(store))
		}
		a.userGCRA = b.gcra
	}
	if !a.DisableCaptcha {
		a.issuer = captcha.NewIssuer(b.captchas, a.captchaOpts)
	}
	shownByID := make(map[string]shown, len(a.Activities))
	for id, act := range a.Activities {
		shownByID[id] = shown{reveal: time.Duration(act.Reveal), price: act.Price, title: act.Title}
	}
	a.acts = newActivities(b.guard, shownByID)
	if a.rooms, a.line, a.spender, err = provisionRooms(a.Activities, b.store, store); err != nil {
		return err
	}
	storeMetrics, _ := b.store.(prometheus.Collector) // a store's own metrics, if it has any
	if a.metrics, err = newMetrics(a.registry, a.acts, b.guard, a.verifier, storeMetrics); err != nil {
		return err
	}
	if a.roomMetrics, err = registerRoomMetrics(a.registry, a); err != nil {
		return err
	}
	if a.orders != nil {
		if err := registerOrdersMetrics(a.registry, a.orders); err != nil {
			return err
		}
	}
	if a.fallbackGauge, err = registerFallbackGauge(a.registry); err != nil {
		return err
	}
	return nil
}

// Bounds of body_timeout: a body of the API is small, so 10 s is plenty on a slow phone link.
const (
	defaultBodyTimeout = 10 * time.Second
	minBodyTimeout     = time.Second
	maxBodyTimeout     = 10 * time.Minute
)

// bodyTimeout returns the configured body_timeout, or its default when it is not set.
func bodyTimeout(d caddy.Duration) (time.Duration, error) {
	t := time.Duration(d)
	switch {
	case t == 0:
		return defaultBodyTimeout, nil
	case t < minBodyTimeout || t > maxBodyTimeout:
		return 0, fmt.Errorf("body_timeout %s: want %s to %s", t, minBodyTimeout, maxBodyTimeout)
	}
	return t, nil
}

// ready waits until Start has opened the store and returns the opening's error: Caddy starts the
// apps of a configuration in no set order, so its HTTP servers may take requests a moment before
// this app has started. A configuration that never starts answers errAppNotStarted.
func (a *App) ready(ctx context.Context) error {
	// Every request asks, and once started the answer never changes: a receive that cannot block
	// answers it without ctx.Done (which may make the request's channel) and a two-way select.
	select {
	case <-a.run.opened:
		return a.run.openErr
	default:
	}
	select {
	case <-a.run.opened:
		return a.run.openErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// isOpen reports, without waiting, whether Start has opened the store.
func (a *App) isOpen() bool {
	select {
	case <-a.run.opened:
		return a.run.openErr == nil
	default:
		return false
	}
}

// errAppNotStarted is ready's answer for a configuration that was cleaned up without starting.
var errAppNotStarted = errors.New("the seckill app did not start")

// markOpened records the outcome of open, once, and wakes the requests that wait in ready.
func (r *runner) markOpened(err error) {
	r.openOnce.Do(func() {
		r.openErr = err
		close(r.opened)
	})
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

// Start opens the store (open), defines the configured activities in it, starts the embedded order
// backend (once: a reload finds it running) and the activity refresher. A definition that would change a running
// sale, or a waiting room's terms under its buyers (refuseRoomChanges), fails the start, so the
// previous configuration stays in force.
func (a *App) Start() error {
	a.run.mu.Lock()
	a.run.started = true
	a.run.mu.Unlock()
	err := a.open()
	a.run.markOpened(err)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := a.refuseStoreSwitch(ctx, a.inForce, a.backendKey); err != nil {
		return err
	}
	if err := a.refuseRoomChanges(ctx); err != nil {
		return err
	}
	// No activity may be defined afresh over the orders of a sale of its id that the store lost
	// or deleted: it would sell those items again. The check comes before any definition, as
	// the other gateways of a shared store would sell what this one defined. A reload finds the
	// order database open; the first start opens it for the check, and starts the backend only
	// once the definitions have succeeded.
	if a.orders != nil && a.orders.state() == nil {
		if err := a.orders.check(ctx, refuseForgottenSales(a.store, a.backend.guard, slices.Sorted(maps.Keys(a.Activities)))); err != nil {
			return err
		}
	} else {
		for id := range a.Activities {
			_, err := throughTrial(ctx, func() (struct{}, error) {
				return struct{}{}, a.orders.refuseEarlierSale(ctx, a.backend.guard, id)
			})
			if err != nil {
				return err
			}
		}
	}
	defs, err := a.defineActivities(ctx)
	if err != nil {
		return err
	}
	if a.orders != nil {
		// A runner not started yet serves no configuration: its workers need this one's prices
		// and titles from their first order on. A running one takes them only once nothing
		// can fail any more: a refused start leaves it as it was.
		fresh := a.orders.state() == nil
		if fresh {
			a.listings = a.orders.setListings(a.Activities)
		}
		if err := a.orders.start(ctx); err != nil {
			return err
		}
		if err := a.orders.syncStock(ctx, defs); err != nil {
			return err
		}
		if !fresh {
			a.listings = a.orders.setListings(a.Activities)
		}
	}
	if err := a.acts.refresh(ctx); err != nil {
		a.logger.Warn("listing activities", zap.Error(err))
	}
	a.warnFallbackSecrets(httpListeners(a.ctx))
	a.warnLooseProxies(a.ctx)
	a.warnURLSecretChanged(time.Now())
	a.inForceGen, a.inForcePrev = a.inForce.set(a.backendKey, storeDirective(a.store), a.backend)
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
	for _, id := range a.definitionOrder(ctx) {
		c := a.Activities[id]
		def, err := throughTrial(ctx, func() (admission.Activity, error) { return a.defineActivity(ctx, id, c) })
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

// throughTrial calls f until the store's breaker stops refusing it before trying, or ctx ends. An
// open breaker refuses at once: a start right after the store came back (a Redis restart, a
// store local opened again after a full disk) waits for its trial instead of failing.
func throughTrial[T any](ctx context.Context, f func() (T, error)) (T, error) {
	v, err := f()
	for admission.BreakerRefused(err) && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
		v, err = f()
	}
	return v, err
}

// definitionOrder orders the configured activities for defineActivities: first those whose
// stored window has opened (their definition is a no-op or refused, and a refusal writes nothing),
// then the others by start. A reload refused for a running activity thus redefines no upcoming
// one (the configuration in force keeps its definitions in the store), unless a start passes
// between this reading and the definitions.
func (a *App) definitionOrder(ctx context.Context) []string {
	now := time.Now()
	ids := make([]string, 0, len(a.Activities))
	opened := make(map[string]bool, len(a.Activities))
	for id := range a.Activities {
		ids = append(ids, id)
		if snap, err := readActivity(ctx, a.backend.guard, id); err == nil && !snap.Start.After(now) {
			opened[id] = true
		}
	}
	slices.SortFunc(ids, func(x, y string) int {
		if opened[x] != opened[y] {
			if opened[x] {
				return -1
			}
			return 1
		}
		if c := a.Activities[x].Start.Compare(a.Activities[y].Start); c != 0 {
			return c
		}
		return strings.Compare(x, y)
	})
	return ids
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
// A configuration Caddy stops with no other started after it (a reload rolled back because
// another app failed to start) gives the record of the store in force back (inForce.unset).
func (a *App) Stop() error {
	if a.inForce != nil {
		a.inForce.unset(a.inForceGen, a.inForcePrev)
	}
	if a.orders != nil {
		a.orders.unsetListings(a.listings)
	}
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
	if r := a.run; r != nil {
		r.markOpened(errAppNotStarted)
		r.mu.Lock()
		unstarted := r.provisioned && !r.started
		r.mu.Unlock()
		if unstarted {
			a.logger.Info("the store was not opened: this configuration was only provisioned (caddy validate), "+
				"or did not start; what needs the running store was not checked",
				zap.String("store", storeDirective(a.store)), zap.Strings("unchecked", a.uncheckedAtValidate()))
		}
	}
	var errs []error
	for i := len(a.poolKeys) - 1; i >= 0; i-- {
		if _, err := pool.Delete(a.poolKeys[i]); err != nil {
			errs = append(errs, err)
		}
	}
	a.poolKeys = nil
	return errors.Join(errs...)
}

// uncheckedAtValidate lists the checks that need the running store, which only Start makes.
func (a *App) uncheckedAtValidate() []string {
	checks := []string{"opening " + storeDirective(a.store)}
	if len(a.Activities) > 0 {
		checks = append(checks, "the activities against the sale in the store (a running sale's definition "+
			"unchanged, no stock below the items sold)")
	}
	if len(a.rooms) > 0 {
		checks = append(checks, "the waiting rooms against their lines (admit and session as the line's first join fixed them)")
	}
	if a.Orders != nil {
		checks = append(checks, "the order database opens and holds no orders of a sale the store does not know")
	}
	return checks
}

// Guard returns the guarded admission store, for the admin API and the order backend.
func (a *App) Guard() *admission.Guard { return a.backend.guard }

// Interface guards
var (
	_ caddy.App          = (*App)(nil)
	_ caddy.Provisioner  = (*App)(nil)
	_ caddy.CleanerUpper = (*App)(nil)
)
