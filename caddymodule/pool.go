package caddymodule

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/localstore"
	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/captcha"
	"github.com/caddy-seckill/caddy-seckill/internal/redisclient"
	"github.com/caddy-seckill/caddy-seckill/ratelimit"
)

// pool keeps the state that must outlive a config reload: stores (a memory store is the sale
// itself), their Redis clients, guards, captcha stores and node-local rate limiters. Values are
// keyed by the configuration that built them, so a reload with an unchanged store keeps the same
// one and a changed store gets a new one; the last config that uses a value destroys it.
var pool = caddy.NewUsagePool()

// Bounds of node-local state.
const (
	maxLimiterKeys = 100_000 // buckets per local rate limiter
	maxCaptchaIDs  = 100_000 // captchas held by the memory captcha store
)

// Redis client timeouts. An admission script runs in well under a millisecond; these bound how
// long a request waits on a Redis that is gone.
const (
	redisDialTimeout = time.Second
	redisIOTimeout   = time.Second
	// admitTimeout bounds one buy's wait for the store, queueing and a retry included, so that a
	// stalled Redis costs a buyer about a second before 503 busy (and then nothing, once the
	// breaker is open), not the client's read timeout times its attempts.
	admitTimeout = time.Second
	// breakerOpenTimeout is how long the breaker stays open before one trial call: a failover
	// ends within about a second of the promotion (docs/failover.md), and the library's 2 s
	// would add up to 2 s of 503 to it. A trial every half second costs a dead Redis nothing.
	breakerOpenTimeout = 500 * time.Millisecond
)

// backend is the shared admission state of one store configuration.
type backend struct {
	cfg      StoreConfig           // placeholders replaced; a local store's Dir is absolute
	client   redis.UniversalClient // nil for the memory and local stores
	store    admission.Store
	guard    *admission.Guard
	captchas captcha.Store
	gcra     *ratelimit.GCRA  // nil for the memory store
	local    *reopenableLocal // the store, for store local; nil otherwise

	// secret signs buy paths when the configuration gives no url_secret; it lives as long as the
	// store so that a reload does not invalidate the paths already handed out.
	secret []byte
}

// backendKey identifies a store configuration in the pool. Placeholders are already replaced. A
// local store is keyed by its folder alone: one process may open a folder once (the store locks
// it), so every configuration naming that folder must share the one open store.
func backendKey(s *StoreConfig) (string, error) {
	if s == nil {
		s = &StoreConfig{}
	}
	if s.typ() == storeLocal {
		return "seckill.backend:local:" + s.Dir, nil
	}
	b, err := json.Marshal(s)
	if err != nil {
		return "", fmt.Errorf("encode store config: %w", err)
	}
	return "seckill.backend:" + string(b), nil
}

// loadBackend returns the pooled backend for s, creating it on first use. The caller must
// pool.Delete(key) once it no longer needs it.
func loadBackend(s *StoreConfig, logger *zap.Logger) (*backend, string, error) {
	key, err := backendKey(s)
	if err != nil {
		return nil, "", err
	}
	v, loaded, err := pool.LoadOrNew(key, func() (caddy.Destructor, error) { return newBackend(s, logger) })
	if err != nil {
		return nil, "", err
	}
	b := v.(*backend)
	switch {
	case !loaded:
		logger.Info("admission store ready", zap.String("store", s.typ()), zap.String("dir", s.Dir))
		if b.local != nil {
			if n := b.local.Stats().Replayed; n > 0 {
				logger.Warn("store local replayed changes from its ring that a crash had left uncommitted",
					zap.String("dir", s.Dir), zap.Uint64("changes", n))
			}
		}
	case b.local == nil:
	case s.fsyncAlways() != b.cfg.fsyncAlways():
		_, _ = pool.Delete(key)
		return nil, "", fmt.Errorf("the running store has fsync %s: a reload cannot change it (the folder is "+
			"open once per process); restart Caddy to change it", b.cfg.fsyncWord())
	default:
		// A reload is the operator's way to bring back a store whose commit failed (a full disk):
		// the folder is opened again, which loads what was committed.
		reopened, err := b.local.reopen()
		if err != nil {
			_, _ = pool.Delete(key)
			return nil, "", err
		}
		if reopened {
			logger.Warn("store local opened again after a failed commit", zap.String("dir", s.Dir))
		}
	}
	return b, key, nil
}

func newBackend(s *StoreConfig, logger *zap.Logger) (*backend, error) {
	b := &backend{cfg: *s, secret: make([]byte, 32)}
	if _, err := rand.Read(b.secret); err != nil {
		return nil, fmt.Errorf("generate url secret: %w", err)
	}
	switch s.typ() {
	case storeMemory:
		b.store = localstore.NewMemory(localstore.MemoryOptions{})
		b.captchas = captcha.NewMemoryStore(maxCaptchaIDs)
	case storeLocal:
		// The store bounds the wait for a commit itself, with one timer per commit.
		st, err := openReopenableLocal(s.Dir, localstore.Options{FsyncAlways: s.fsyncAlways(), WaitTimeout: admitTimeout})
		if errors.Is(err, localstore.ErrLocked) {
			return nil, fmt.Errorf("the folder is in use by another process (another Caddy, or `caddy validate` "+
				"while one runs): one process at a time may open a store folder: %w", err)
		}
		if err != nil {
			return nil, err
		}
		b.store, b.local = st, st
		// Captchas stay in memory: one lives two minutes, and a buyer whose captcha a restart
		// forgot asks for a new one.
		b.captchas = captcha.NewMemoryStore(maxCaptchaIDs)
	case storeRedis:
		// redisclient adds what a Cluster failover needs: go-redis alone keeps sending a dead
		// master's slots to its address for up to a minute (docs/failover.md).
		b.client = redisclient.New(&redis.UniversalOptions{
			Addrs:         s.Addresses,
			Username:      s.Username,
			Password:      s.Password,
			DB:            s.DB,
			MasterName:    s.SentinelMaster,
			IsClusterMode: s.Cluster,
			// Fail fast: at the edge a request waiting seconds for a dead Redis is worse than a
			// 503 busy, and the breaker needs failures to open. One retry is kept, as every
			// script is idempotent under it (request ids).
			DialTimeout:   redisDialTimeout,
			DialerRetries: 1,
			PoolSize:      s.poolSize(),
			MaxRetries:    1,
			ReadTimeout:   redisIOTimeout,
			WriteTimeout:  redisIOTimeout,
			// go-redis's health check of every idle connection it hands out is kept on purpose: it
			// drops the connections a restart or failover left dead (docs/admission.md, "The
			// gateway's Redis client").
		})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := b.client.Ping(ctx).Err()
		if err == nil {
			warnEvictionPolicy(ctx, b.client, logger)
		}
		cancel()
		if err != nil {
			_ = b.client.Close()
			return nil, fmt.Errorf("connect to redis %v: %w", s.Addresses, err)
		}
		prefix := s.KeyPrefix
		if prefix == "" {
			prefix = "seckill"
		}
		st, err := redisstore.New(b.client, redisstore.Options{
			KeyPrefix: prefix, AutoPipeline: s.AutoPipeline, AdmitBatch: s.AdmitBatch,
			ReplicasAck: s.ReplicasAck, ReplicasAckTimeout: time.Duration(s.ReplicasAckTimeout),
			RebalanceInterval: time.Duration(s.RebalanceInterval),
		})
		if err != nil {
			_ = b.client.Close()
			return nil, err
		}
		b.store = st
		b.captchas = captcha.NewRedisStore(b.client, prefix)
		b.gcra = ratelimit.NewGCRA(b.client, prefix)
	}
	// The memory store answers in microseconds and cannot stall; store local bounds its wait for a
	// disk itself (localstore.Options.WaitTimeout), so only Redis calls get a deadline per call.
	var timeout, open time.Duration
	if b.client != nil {
		timeout, open = admitTimeout, breakerOpenTimeout
	}
	b.guard = admission.NewGuard(b.store, admission.GuardOptions{
		Name:         "seckill",
		AdmitTimeout: timeout,
		OpenTimeout:  open,
		OnStateChange: func(name string, from, to gobreaker.State) {
			logger.Warn("admission circuit breaker", zap.String("breaker", name),
				zap.Stringer("from", from), zap.Stringer("to", to))
		},
	})
	// The guard's background work belongs to the backend, not to one config: it stops in Destruct.
	b.guard.Start(context.Background())
	return b, nil
}

// Destruct stops the guard and closes the store (which closes its Redis client).
func (b *backend) Destruct() error {
	return errors.Join(b.guard.Close(), b.store.Close())
}

// limiter is a pooled node-local rate limiter: its buckets survive a reload that keeps the rate.
type limiter struct{ *ratelimit.Local }

// Destruct implements caddy.Destructor; a limiter holds memory only.
func (limiter) Destruct() error { return nil }

// loadLimiter returns the pooled local limiter of one kind ("ip", "user", "captcha") and rate.
// The caller must pool.Delete(key) once it no longer needs it.
func loadLimiter(kind string, r ratelimit.Rate) (*ratelimit.Local, string, error) {
	key := "seckill.limiter:" + kind + ":" + r.String()
	v, _, err := pool.LoadOrNew(key, func() (caddy.Destructor, error) {
		return limiter{ratelimit.NewLocal(r, maxLimiterKeys)}, nil
	})
	if err != nil {
		return nil, "", err
	}
	return v.(limiter).Local, key, nil
}
