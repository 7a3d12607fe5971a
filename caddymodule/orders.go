package caddymodule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/jwtauth"
	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

// ordersRunner is the embedded order backend of one orders configuration over one store: the
// order database and the consumer, sweeper and outbox relay workers. It lives in the pool, keyed
// by both configurations, so that a reload that keeps them keeps the workers (and the work they
// are doing) running. It is opened by the first configuration that starts with it, not at
// provisioning, so that `caddy validate` neither creates a database nor consumes wins; the last
// configuration that uses it stops it.
type ordersRunner struct {
	cfg    OrdersConfig    // placeholders replaced
	store  admission.Store // the pooled store's guard: releases clear this node's sold-out flag at once
	logger *zap.Logger
	// syncFull flushes each SQLite order commit to the device, as the store does (store local,
	// fsync always): a power loss must not keep a win's acknowledgement and lose its order.
	syncFull bool

	mu     sync.Mutex // serialises start and Destruct
	cancel context.CancelFunc
	done   chan struct{}

	running atomic.Pointer[ordersState] // nil until started; read by every order API call

	// listings are the activities' prices and titles of the configuration started last (a reload
	// may change them, a refused one does not; orders made before keep theirs).
	listings atomic.Pointer[map[string]orderbackend.Listing]
	payments orderbackend.Payments
	warn     atomic.Pointer[func()] // the configuration loaded last's check of its provider and listeners
}

// listingsSwap is one setListings: the listings it set and those they replaced.
type listingsSwap struct {
	set, prev *map[string]orderbackend.Listing
}

// setListings takes the activities' prices and titles for the orders made from now on.
func (o *ordersRunner) setListings(acts map[string]*ActivityConfig) listingsSwap {
	m := make(map[string]orderbackend.Listing, len(acts))
	for id, a := range acts {
		l := orderbackend.Listing{Title: a.Title}
		if a.Price != nil {
			l.Price = *a.Price
		}
		m[id] = l
	}
	return listingsSwap{set: &m, prev: o.listings.Swap(&m)}
}

// unsetListings puts back the listings s replaced while s's are still in force: Caddy stopped
// their configuration without another starting after it, as when it rolls back a reload whose
// other app failed to start after this one, and the configuration before stays in force.
func (o *ordersRunner) unsetListings(s listingsSwap) {
	if s.set != nil {
		o.listings.CompareAndSwap(s.set, s.prev)
	}
}

// listing is the consumer's Listing.
func (o *ordersRunner) listing(activity string) orderbackend.Listing {
	if m := o.listings.Load(); m != nil {
		return (*m)[activity]
	}
	return orderbackend.Listing{}
}

// ordersState is what a started runner serves from.
type ordersState struct {
	repo    orderbackend.Repository
	backend *orderbackend.Backend
	api     http.Handler
}

// ordersKey identifies an orders configuration over a store configuration in the pool.
func ordersKey(storeKey string, c *OrdersConfig) (string, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("encode orders config: %w", err)
	}
	return "seckill.orders:" + string(b) + "|" + storeKey, nil
}

// loadOrders returns the pooled runner of c over the store backend b (pooled under storeKey),
// creating it, unstarted, on first use. The caller must pool.Delete(key) once it no longer needs
// it, before it releases the store.
func loadOrders(ctx caddy.Context, storeKey string, b *backend, c *OrdersConfig, pm PaymentsModule, syncFull bool, logger *zap.Logger) (*ordersRunner, string, error) {
	key, err := ordersKey(storeKey, c)
	if err != nil {
		return nil, "", err
	}
	v, _, err := pool.LoadOrNew(key, func() (caddy.Destructor, error) {
		pay, err := pm.OpenPayments(logger.Named("payments"))
		if err != nil {
			return nil, fmt.Errorf("orders payments %s: %w", pm.CaddyModule().ID.Name(), err)
		}
		return &ordersRunner{cfg: *c, store: b.guard, logger: logger, syncFull: syncFull, payments: pay}, nil
	})
	if err != nil {
		return nil, "", err
	}
	o := v.(*ordersRunner)
	warn := func() { warnNoMoney(ctx, pm, logger) }
	o.warn.Store(&warn)
	return o, key, nil
}

// start opens the order database and starts the workers, unless they already run (a reload).
func (o *ordersRunner) start(ctx context.Context) error {
	if w := o.warn.Load(); w != nil {
		(*w)()
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.running.Load() != nil {
		return nil
	}
	repo, err := o.openRepo(ctx)
	if err != nil {
		return err
	}
	b, err := orderbackend.New(orderbackend.Config{
		Store:    o.store,
		Repo:     repo,
		Auth:     requestVerifier{},
		Payments: o.payments,
		Name:     o.cfg.ConsumerName,
		Consumer: orderbackend.ConsumerOptions{
			MaxDeliveries: o.cfg.MaxDeliveries,
			ClaimIdle:     time.Duration(o.cfg.ClaimIdle),
			Listing:       o.listing,
		},
		Sweeper: orderbackend.SweeperOptions{Every: time.Duration(o.cfg.SweepEvery),
			SettleAfter: time.Duration(o.cfg.SettleAfter)},
		Discover: discoverEvery,
		Logger:   o.logger,
	})
	if err != nil {
		_ = repo.Close()
		return fmt.Errorf("orders: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	o.cancel, o.done = cancel, make(chan struct{})
	go func() {
		defer close(o.done)
		_ = b.Run(runCtx) // returns once runCtx is done and every worker stopped
	}()
	o.running.Store(&ordersState{repo: repo, backend: b, api: b.Handler()})
	o.logger.Info("order backend running", zap.String("database", o.cfg.Type))
	return nil
}

// check opens the order database, runs check on it and closes it: the first start's check,
// made before any activity is defined, while the backend itself starts only once the
// definitions have succeeded (a refused start runs no worker).
func (o *ordersRunner) check(ctx context.Context, check func(context.Context, orderbackend.Repository) error) error {
	repo, err := o.openRepo(ctx)
	if err != nil {
		return err
	}
	return errors.Join(check(ctx, repo), repo.Close())
}

// openRepo opens the order database of the configuration.
func (o *ordersRunner) openRepo(ctx context.Context) (orderbackend.Repository, error) {
	var (
		repo orderbackend.Repository
		err  error
	)
	if o.cfg.Type == ordersSQLite {
		repo, err = orderbackend.NewSQLiteOptions(ctx, o.cfg.DSN, orderbackend.SQLiteOptions{SyncFull: o.syncFull})
	} else {
		repo, err = orderbackend.OpenRepositoryWith(ctx, o.cfg.Type, o.cfg.DSN, orderbackend.PostgresOptions{Partitions: o.cfg.Partitions})
	}
	if err != nil {
		where := o.cfg.Type
		if o.cfg.Type == ordersSQLite {
			where += " " + o.cfg.DSN // a file name; a PostgreSQL DSN may hold a password
		}
		return nil, fmt.Errorf("orders %s: open the order database: %w", where, err)
	}
	return repo, nil
}

// state returns the running backend, or nil before the first start.
func (o *ordersRunner) state() *ordersState {
	if o == nil {
		return nil
	}
	return o.running.Load()
}

// Destruct stops the workers, waiting for the work in hand to finish, and closes the database.
func (o *ordersRunner) Destruct() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	st := o.running.Swap(nil)
	if st == nil {
		return nil
	}
	o.cancel()
	<-o.done
	o.logger.Info("order backend stopped", zap.Any("metrics", st.backend.Metrics()))
	if err := st.repo.Close(); err != nil {
		return fmt.Errorf("orders: close the order database: %w", err)
	}
	return nil
}

// syncStock creates or updates the database stock row of each activity from its definition in
// the store. The consumers do it too when they start, but a row that exists at once lets
// reconcile and the first orders not wait for them.
func (o *ordersRunner) syncStock(ctx context.Context, defs []admission.Activity) error {
	st := o.state()
	if st == nil {
		return nil
	}
	for _, def := range defs {
		if err := st.repo.EnsureStock(ctx, def.ID, def.Stock); err != nil {
			return fmt.Errorf("orders: stock of activity %s: %w", def.ID, err)
		}
	}
	return nil
}

// errForgottenSale refuses an embedded store over an order database that holds orders of a sale
// the store has never seen: a memory store's earlier run, forgotten by the restart, or a local
// store whose folder was deleted or replaced. Going on would sell those items again (the store
// starts from the full stock) and break reconcile.
var errForgottenSale = errors.New("the order database holds orders of a sale this store does not know")

// refuseForgottenSales is the first start's check of the embedded backend, before any
// definition: no configured activity (ids) may have orders in the database while the store has
// no win of it. The store module gives the advice (SaleForgetter), else earlierSaleAdvice.
func refuseForgottenSales(m StoreModule, store admission.Store, ids []string) func(context.Context, orderbackend.Repository) error {
	advice := earlierSaleAdvice
	if f, ok := m.(SaleForgetter); ok {
		advice = f.ForgottenSaleAdvice()
	}
	return func(ctx context.Context, repo orderbackend.Repository) error {
		for _, id := range ids {
			held, err := throughTrial(ctx, func() (int64, error) { return forgottenSale(ctx, store, repo, id) })
			if errors.Is(err, errForgottenSale) {
				return fmt.Errorf("%s with orders: activity %s: %w (%d items sold there; selling on would "+
					"sell them again): %s", storeDirective(m), id, err, held, advice)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
}

// earlierSaleAdvice is the advice for a new sale over the orders of a deleted one.
const earlierSaleAdvice = "an activity deleted from the store keeps the orders of its sale in the " +
	"order database, and a new sale of the same id would count them against its stock and refuse " +
	"its winners' orders: give the new sale a new activity id"

// refuseEarlierSale refuses to define activity id anew, in the store or through a reload, while
// the embedded order database holds orders of a sale of that id the store has no win of (it was
// deleted, or the store forgot it). Without an embedded order backend it checks nothing.
func (o *ordersRunner) refuseEarlierSale(ctx context.Context, store admission.Store, id string) error {
	st := o.state()
	if st == nil {
		return nil
	}
	held, err := forgottenSale(ctx, store, st.repo, id)
	if errors.Is(err, errForgottenSale) {
		return fmt.Errorf("activity %s: %w (%d items sold there): %s", id, err, held, earlierSaleAdvice)
	}
	return err
}

// errOrdersNotStarted answers a check that needs the embedded order database before the backend
// has started.
var errOrdersNotStarted = errors.New("the order backend has not started")

// holdingOrder returns the embedded backend's order of reservation resv of activity when it holds
// the item: pending payment (its buyer may still pay) or paid. Without an embedded backend, and
// for a reservation with no order or a cancelled one (whose release is the relay's), it answers
// false.
func (o *ordersRunner) holdingOrder(ctx context.Context, activity, resv string) (orderbackend.Order, bool, error) {
	if o == nil {
		return orderbackend.Order{}, false, nil
	}
	st := o.state()
	if st == nil {
		return orderbackend.Order{}, false, errOrdersNotStarted
	}
	ord, err := st.repo.OrderByReservation(ctx, activity, resv)
	switch {
	case errors.Is(err, orderbackend.ErrNotFound):
		return orderbackend.Order{}, false, nil
	case err != nil:
		return orderbackend.Order{}, false, fmt.Errorf("orders: order of reservation %s: %w", resv, err)
	}
	return ord, ord.Status == orderbackend.StatusPending || ord.Status == orderbackend.StatusPaid, nil
}

// forgottenSale reports errForgottenSale, with the items the orders hold, when the order database
// has orders of activity id and the store has made no win of it or does not know it.
func forgottenSale(ctx context.Context, store admission.Store, repo orderbackend.Repository, id string) (int64, error) {
	snap, err := store.Activity(ctx, id)
	switch {
	case errors.Is(err, admission.ErrUnknownActivity):
	case err != nil:
		return 0, fmt.Errorf("orders: activity %s: %w", id, err)
	case snap.Queued > 0 || snap.Sold > 0:
		return 0, nil // this store made wins of it: the same sale
	}
	db, err := repo.Stock(ctx, id)
	switch {
	case errors.Is(err, orderbackend.ErrNotFound):
		return 0, nil // never sold through this database
	case err != nil:
		return 0, fmt.Errorf("orders: stock of activity %s: %w", id, err)
	}
	held := db.Total - db.Left
	if held == 0 {
		orders, err := repo.Orders(ctx, id)
		if err != nil {
			return 0, fmt.Errorf("orders: activity %s: %w", id, err)
		}
		if len(orders) == 0 {
			return 0, nil
		}
	}
	return held, errForgottenSale
}

// verifierKey carries the token verifier of the configuration serving a request to the order
// API, so that the pooled API, which outlives configurations, checks tokens with the current one.
type verifierKey struct{}

func withVerifier(ctx context.Context, v *jwtauth.Verifier) context.Context {
	return context.WithValue(ctx, verifierKey{}, v)
}

// requestVerifier is the order API's Authenticator: the verifier the request carries.
type requestVerifier struct{}

// Verify implements orderbackend.Authenticator.
func (requestVerifier) Verify(ctx context.Context, token string) (string, error) {
	v, _ := ctx.Value(verifierKey{}).(*jwtauth.Verifier)
	if v == nil {
		// Not ErrUnauthorized: a request that reached the API without a verifier is a bug, and
		// the buyer's token may be fine.
		return "", errors.New("orders: no token verifier with the request")
	}
	user, err := orderbackend.JWT(v).Verify(ctx, token)
	if err == nil && !usableUser(user) {
		return "", fmt.Errorf("%w: the token names no usable user", jwtauth.ErrUnauthorized)
	}
	return user, err
}
