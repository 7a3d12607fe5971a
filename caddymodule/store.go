package caddymodule

import (
	"encoding/json"
	"fmt"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// storeNamespace is the namespace of the store guest modules: seckill.stores.memory (the
// default), seckill.stores.local and seckill.stores.redis, or a third party's.
const storeNamespace = "seckill.stores"

// StoreModule is what a guest module of the namespace seckill.stores provides: the configuration
// of an admission store, which opens it. Caddy provisions the module (placeholders replaced,
// options validated); the app opens the store once per PoolKey and shares it, under one Guard,
// across the reloads that keep the key. A store passes the conformance suite of package
// admissiontest. The optional interfaces below add what some stores need.
type StoreModule interface {
	caddy.Module

	// PoolKey identifies the store the configuration opens: configurations with one key share one
	// open store.
	PoolKey() string

	// OpenStore opens the store.
	OpenStore() (admission.Store, error)
}

// StoreReuser is a store module that checks, when a reload finds its store open, that the new
// configuration can use it, and repairs it if it must (store local opens its folder again after
// a failed commit).
type StoreReuser interface {
	Reuse(admission.Store) error
}

// StoreDirective is a store module that names itself in messages more precisely than
// "store <name>" (store local gives its folder).
type StoreDirective interface {
	Directive() string
}

// URLSecretNeeder is a store module whose sale outlives this process (it is durable, or shared by
// several nodes): the buy paths must be signed with a configured url_secret, not a random one.
// NeedsURLSecret says why.
type URLSecretNeeder interface {
	NeedsURLSecret() string
}

// StockSplitter is a store module that can split an activity's stock into buckets
// (activity { buckets }); the other stores keep an activity in one place.
type StockSplitter interface {
	SplitsStock() bool
}

// LineKeeper is a store module whose store keeps a waiting room's line (its opened store is a
// waitroom.Line): store memory and local keep the node's own, store redis one shared by every
// gateway. An activity with a waiting_room needs one; a store module without it is refused when the
// Caddyfile adapts and at Provision, before anything is opened.
type LineKeeper interface {
	KeepsLine() bool
}

// keepsLine reports whether the store module m keeps a line; nil is the default, store memory.
func keepsLine(m StoreModule) bool {
	if m == nil {
		return true
	}
	k, ok := m.(LineKeeper)
	return ok && k.KeepsLine()
}

// SaleForgetter is a store module that says how it can have lost a sale the embedded order
// database still has orders of (memory: a restart; local: a folder replaced; redis: a flush or
// another server). The app then refuses to define the activity, with this advice.
type SaleForgetter interface {
	ForgottenSaleAdvice() string
}

// DeviceSyncer is a store module that flushes every commit to the device; the embedded SQLite
// order database then does the same.
type DeviceSyncer interface {
	SyncsToDevice() bool
}

// ExistingOpener is a store module that reconcile can open outside the running Caddy: it opens
// the store without creating anything, and answers admission.ErrInUse when the running Caddy
// holds it (reconcile then asks that Caddy). Without it, reconcile always asks the running Caddy.
type ExistingOpener interface {
	OpenExisting() (admission.Store, error)
}

// RedisBacked is a store module whose opened store is a RedisStore, so that Provision can check
// what needs Redis (rate_limit user distributed) without opening the store.
type RedisBacked interface {
	OnRedis()
}

// RedisStore is an opened store on Redis: the captchas and the distributed user rate limit share
// its client and key prefix, and its calls get a deadline, as a network can stall them.
type RedisStore interface {
	Redis() (redis.UniversalClient, string)
}

// storeName is the module's name within the namespace ("redis" for seckill.stores.redis).
func storeName(m StoreModule) string {
	return string(m.CaddyModule().ID.Name())
}

// storeDirective names the store for messages.
func storeDirective(m StoreModule) string {
	if d, ok := m.(StoreDirective); ok {
		return d.Directive()
	}
	return "store " + storeName(m)
}

// parseStore parses "store <name> ..." of the global seckill block with the named store module's
// own Caddyfile syntax (its UnmarshalCaddyfile) and returns the module's JSON and the module.
func parseStore(d *caddyfile.Dispenser) (json.RawMessage, StoreModule, error) {
	if !d.NextArg() {
		return nil, nil, d.ArgErr()
	}
	name, unm, err := unmarshalGuest(d, storeNamespace, "seckill: unknown store %q: want one of %s")
	if err != nil {
		return nil, nil, err
	}
	m, ok := unm.(StoreModule)
	if !ok {
		return nil, nil, d.Errf("seckill: module %s.%s is not a store (%T)", storeNamespace, name, unm)
	}
	return caddyconfig.JSONModuleObject(unm, "type", name, nil), m, nil
}

// loadStoreModule provisions the app's store module (store memory when none is configured).
func (a *App) loadStoreModule(ctx caddy.Context) (StoreModule, error) {
	if len(a.StoreRaw) == 0 {
		a.StoreRaw = []byte(`{"type":"memory"}`)
	}
	v, err := ctx.LoadModule(a, "StoreRaw")
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	m, ok := v.(StoreModule)
	if !ok {
		return nil, fmt.Errorf("store: module %T is not a store (it has no PoolKey and OpenStore)", v)
	}
	return m, nil
}
