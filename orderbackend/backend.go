package orderbackend

import (
	"context"
	"errors"
	"net/http"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// BackendStore is what a Backend needs of the store: what its consumers need, the list of
// activities to start them for, and the queue's backlog for the metrics. An admission.Store is
// one.
type BackendStore interface {
	ConsumerStore
	Activities(ctx context.Context) ([]string, error)
	Backlog(ctx context.Context, activity, group string) (int64, error)
}

var _ BackendStore = admission.Store(nil)

// Config configures a Backend. Store and Repo are required; Auth is required for Handler.
type Config struct {
	Store    BackendStore
	Repo     Repository
	Auth     Authenticator
	Payments Payments // required with Auth (the order API charges it); the sweeper settles through it

	// Name is this process's consumer name in every activity's group. It must be stable across
	// restarts (so a restarted process re-reads its own pending entries first) and distinct per
	// process; default: the host name.
	Name string

	Consumer ConsumerOptions // Name, Logger and Metrics are set by the Backend
	Sweeper  SweeperOptions  // Logger, Metrics, OnCancel and Payments are set by the Backend
	Relay    RelayOptions    // Logger and Metrics are set by the Backend

	// Discover is how often the store's list of activities is re-read to start consumers for new
	// ones; default 5s.
	Discover time.Duration

	Logger *zap.Logger
}

// Backend is the whole order backend of one process: a Consumer per activity (started as
// activities appear in the store), a Sweeper, a Relay and the order API. It runs standalone
// (cmd/orderbackend) or inside the Caddy process.
type Backend struct {
	cfg     Config
	log     *zap.Logger
	metrics *Metrics
	relay   *Relay
	sweeper *Sweeper
	api     *API
}

// New checks cfg and returns a Backend; Run starts its background work.
func New(cfg Config) (*Backend, error) {
	if cfg.Store == nil || cfg.Repo == nil {
		return nil, errors.New("order backend: a store and a repository are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Name == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "orderbackend"
		}
		cfg.Name = host
	}
	if cfg.Discover <= 0 {
		cfg.Discover = 5 * time.Second
	}
	b := &Backend{cfg: cfg, log: cfg.Logger, metrics: new(Metrics)}

	ro := cfg.Relay
	ro.Logger, ro.Metrics = b.log.Named("relay"), b.metrics
	b.relay = NewRelay(cfg.Store, cfg.Repo, ro)

	so := cfg.Sweeper
	so.Logger, so.Metrics, so.OnCancel, so.Payments = b.log.Named("sweeper"), b.metrics, b.relay.Wake, cfg.Payments
	b.sweeper = NewSweeper(cfg.Repo, so)

	if cfg.Auth != nil {
		api, err := NewAPI(cfg.Repo, APIOptions{
			// Half the sweeper's wait: it asks about an attempt only once its charge call is over.
			ChargeTimeout: b.sweeper.opts.SettleAfter / 2,
			Auth:          cfg.Auth, Payments: cfg.Payments, Now: cfg.Sweeper.Now, Logger: b.log.Named("api"),
			Metrics: b.metrics, OnChange: b.relay.Wake,
		})
		if err != nil {
			return nil, err
		}
		b.api = api
	}
	return b, nil
}

// Handler returns the order API (nil when the Config had no Authenticator).
func (b *Backend) Handler() http.Handler {
	if b.api == nil {
		return nil
	}
	return b.api
}

// Metrics returns a copy of the backend's counters, with the repository's transaction counts.
func (b *Backend) Metrics() MetricsSnapshot {
	m := b.metrics.Snapshot()
	if r, ok := b.cfg.Repo.(TxStatsReporter); ok {
		st := r.TxStats()
		m.Txs, m.TxCalls, m.TxWins = st.Transactions, st.Calls, st.Wins
	}
	return m
}

// Run consumes, sweeps and relays until ctx is done, then waits for all of it to stop. A consumer
// that fails is restarted at the next discovery round.
func (b *Backend) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = b.sweeper.Run(ctx) }()
	go func() { defer wg.Done(); _ = b.relay.Run(ctx) }()

	var mu sync.Mutex
	running := map[string]bool{}
	t := time.NewTicker(b.cfg.Discover)
	defer t.Stop()
	for {
		ids, err := b.cfg.Store.Activities(ctx)
		if err != nil && ctx.Err() == nil {
			b.log.Warn("listing activities failed", zap.Error(err))
		}
		for _, id := range ids {
			mu.Lock()
			if running[id] {
				mu.Unlock()
				continue
			}
			running[id] = true
			mu.Unlock()
			co := b.cfg.Consumer
			co.Name, co.Logger, co.Metrics = b.cfg.Name, b.log.Named("consumer"), b.metrics
			c, err := NewConsumer(b.cfg.Store, b.cfg.Repo, id, co)
			if err != nil {
				b.log.Error("cannot consume activity", zap.String("activity", id), zap.Error(err))
				continue // stays marked: a bad id does not get better
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := c.Run(ctx); err != nil {
					b.log.Error("consumer stopped", zap.String("activity", id), zap.Error(err))
				}
				mu.Lock()
				delete(running, id) // deleted activity or failure: a later round starts it again if it exists
				mu.Unlock()
			}()
		}
		select {
		case <-ctx.Done():
			wg.Wait()
			return nil
		case <-t.C:
		}
	}
}
