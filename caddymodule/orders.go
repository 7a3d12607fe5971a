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

	mu     sync.Mutex // serialises start and Destruct
	cancel context.CancelFunc
	done   chan struct{}

	running atomic.Pointer[ordersState] // nil until started; read by every order API call
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
func loadOrders(storeKey string, b *backend, c *OrdersConfig, logger *zap.Logger) (*ordersRunner, string, error) {
	key, err := ordersKey(storeKey, c)
	if err != nil {
		return nil, "", err
	}
	v, _, err := pool.LoadOrNew(key, func() (caddy.Destructor, error) {
		return &ordersRunner{cfg: *c, store: b.guard, logger: logger}, nil
	})
	if err != nil {
		return nil, "", err
	}
	return v.(*ordersRunner), key, nil
}

// start opens the order database and starts the workers, unless they already run (a reload).
func (o *ordersRunner) start(ctx context.Context) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.running.Load() != nil {
		return nil
	}
	repo, err := orderbackend.OpenRepository(ctx, o.cfg.Type, o.cfg.DSN)
	if err != nil {
		where := o.cfg.Type
		if o.cfg.Type == ordersSQLite {
			where += " " + o.cfg.DSN // a file name; a PostgreSQL DSN may hold a password
		}
		return fmt.Errorf("orders %s: open the order database: %w", where, err)
	}
	b, err := orderbackend.New(orderbackend.Config{
		Store: o.store,
		Repo:  repo,
		Auth:  requestVerifier{},
		Name:  o.cfg.ConsumerName,
		Consumer: orderbackend.ConsumerOptions{
			MaxDeliveries: o.cfg.MaxDeliveries,
			ClaimIdle:     time.Duration(o.cfg.ClaimIdle),
		},
		Sweeper:  orderbackend.SweeperOptions{Every: time.Duration(o.cfg.SweepEvery)},
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
// reconcile and the first orders not wait for them. With the memory store, it warns about orders
// left in the database by an earlier run: the store forgot that sale, the database did not.
func (o *ordersRunner) syncStock(ctx context.Context, defs []admission.Activity, memoryStore bool) error {
	st := o.state()
	if st == nil {
		return nil
	}
	for _, def := range defs {
		if memoryStore {
			o.warnStale(ctx, st.repo, def.ID)
		}
		if err := st.repo.EnsureStock(ctx, def.ID, def.Stock); err != nil {
			return fmt.Errorf("orders: stock of activity %s: %w", def.ID, err)
		}
	}
	return nil
}

// warnStale logs when the database holds sold items of an activity the memory store has not sold.
func (o *ordersRunner) warnStale(ctx context.Context, repo orderbackend.Repository, id string) {
	db, err := repo.Stock(ctx, id)
	if err != nil || db.Left >= db.Total {
		return
	}
	snap, err := o.store.Activity(ctx, id)
	if err != nil || snap.Queued > 0 {
		return
	}
	o.logger.Warn("the order database holds orders of an earlier run of this activity, which the memory "+
		"store has forgotten: the sale will disagree with the database (reconcile fails, late wins are "+
		"refused); delete the database file before restarting a memory-store sale, or use store redis",
		zap.String("activity", id), zap.Int64("db_total", db.Total), zap.Int64("db_left", db.Left))
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
