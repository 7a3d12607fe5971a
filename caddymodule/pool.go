package caddymodule

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/sony/gobreaker/v2"
	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/captcha"
	"github.com/caddy-seckill/caddy-seckill/ratelimit"
)

// pool keeps the state that must outlive a config reload: stores (a memory store is the sale
// itself) with their guards and captcha stores, order backends and node-local rate limiters.
// Values are keyed by the configuration that built them, so a reload with an unchanged store
// keeps the same one and a changed store gets a new one; the last config that uses a value
// destroys it.
var pool = caddy.NewUsagePool()

// Bounds of node-local state.
const (
	maxLimiterKeys = 100_000 // buckets per local rate limiter
	maxCaptchaIDs  = 100_000 // captchas held by the memory captcha store
)

// Deadlines of the stores across a network (RedisStore).
const (
	// admitTimeout bounds one buy's wait for the store, queueing and a retry included, so that a
	// stalled Redis costs a buyer about a second before 503 busy (and then nothing, once the
	// breaker is open), not the client's read timeout times its attempts.
	admitTimeout = time.Second
	// breakerOpenTimeout is how long the breaker stays open before one trial call: a failover
	// ends within about a second of the promotion (docs/failover.md), and the library's 2 s
	// would add up to 2 s of 503 to it. A trial every half second costs a dead Redis nothing.
	breakerOpenTimeout = 500 * time.Millisecond
)

// backend is the shared admission state of one store: the store, its guard, the captchas and,
// on Redis, the distributed rate limiter.
type backend struct {
	store    admission.Store
	guard    *admission.Guard
	captchas captcha.Store
	gcra     *ratelimit.GCRA // nil unless the store is on Redis

	// secret signs buy paths when the configuration gives no url_secret; it lives as long as the
	// store so that a reload does not invalidate the paths already handed out.
	secret []byte

	// pathKeySum is the SHA-256 of the buy paths' secret of the configuration that started last
	// on this store (nil before the first), for Start's warning when a reload changes it. A
	// digest, so the pool keeps no retired secret.
	pathKeySum atomic.Pointer[[sha256.Size]byte]
}

// loadBackend returns the pooled backend of the store module m, opening its store on first use
// and letting m check (StoreReuser) a store that a reload finds open. The caller must
// pool.Delete(key) once it no longer needs it.
func loadBackend(m StoreModule, logger *zap.Logger) (*backend, string, error) {
	key := "seckill.backend:" + m.PoolKey()
	v, loaded, err := pool.LoadOrNew(key, func() (caddy.Destructor, error) { return newBackend(m, logger) })
	if err != nil {
		return nil, "", err
	}
	b := v.(*backend)
	if !loaded {
		logger.Info("admission store ready", zap.String("store", storeDirective(m)))
		return b, key, nil
	}
	if r, ok := m.(StoreReuser); ok {
		if err := r.Reuse(b.store); err != nil {
			_, _ = pool.Delete(key)
			return nil, "", err
		}
	}
	return b, key, nil
}

// newBackend opens the store of m and puts a started guard in front of it.
func newBackend(m StoreModule, logger *zap.Logger) (*backend, error) {
	b := &backend{secret: make([]byte, 32)}
	if _, err := rand.Read(b.secret); err != nil {
		return nil, fmt.Errorf("generate url secret: %w", err)
	}
	st, err := m.OpenStore()
	if err != nil {
		return nil, err
	}
	b.store = st
	// The in-process stores answer in microseconds, and store local bounds its wait for a disk
	// itself; only a store across a network gets a deadline per call.
	var timeout, open time.Duration
	if rs, ok := st.(RedisStore); ok {
		client, prefix := rs.Redis()
		b.captchas = captcha.NewRedisStore(client, prefix)
		b.gcra = ratelimit.NewGCRA(client, prefix)
		timeout, open = admitTimeout, breakerOpenTimeout
	} else {
		// A captcha lives two minutes, and a buyer whose captcha a restart forgot asks for a
		// new one: node-local memory is enough.
		b.captchas = captcha.NewMemoryStore(maxCaptchaIDs)
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
