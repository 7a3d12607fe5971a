package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/internal/redisclient"
)

func init() {
	caddy.RegisterModule(Module{})
}

// Module is the Caddy guest module seckill.stores.redis: the configuration of a Redis store that
// every gateway of a sale shares (one server, a Sentinel set or a Cluster). The seckill app opens
// one store per configuration and keeps it across reloads that do not change it.
type Module struct {
	// Addresses of the Redis server (one), of the cluster nodes (with Cluster) or of the
	// sentinels (with SentinelMaster), as host:port; a single server on the same host may be a
	// Unix socket's path (it starts with "/"), which saves the loopback TCP stack's work.
	Addresses []string `json:"addresses,omitempty"`

	// Username and Password authenticate to Redis (ACL user, or password only). Placeholders
	// such as {env.REDIS_PASSWORD} are replaced at provisioning.
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`

	// DB is the Redis database number (single server and sentinel only).
	DB int `json:"db,omitempty"`

	// KeyPrefix starts every Redis key; default "seckill".
	KeyPrefix string `json:"key_prefix,omitempty"`

	// SentinelMaster names the master monitored by the sentinels at Addresses.
	SentinelMaster string `json:"sentinel_master,omitempty"`

	// Cluster connects to a Redis Cluster through the nodes at Addresses.
	Cluster bool `json:"cluster,omitempty"`

	// AutoPipeline batches concurrent hot-path calls (release, remaining, results; admission has
	// its own pipelines) onto shared connections with go-redis's auto-pipeliner; off unless asked
	// for, as go-redis marks it experimental (docs/admission.md, "The gateway's Redis client").
	AutoPipeline bool `json:"auto_pipeline,omitempty"`

	// AdmitBatch is the most concurrent buys for one activity that share one admission script
	// call (group admission); default 64, at most MaxAdmitBatch. 1 turns grouping off.
	AdmitBatch int `json:"admit_batch,omitempty"`

	// PoolSize is the size of this node's main connection pool to each Redis server; default
	// max(64, 10 × GOMAXPROCS), since the library's default is used up by ten busy activities.
	PoolSize int `json:"pool_size,omitempty"`

	// ReplicasAck, when positive, makes every admission script call and every release wait until
	// this many replicas have its writes (Redis WAIT), at most ReplicasAckTimeout; buys whose win
	// the replicas did not confirm in time are answered 503 busy, and a retry with the same
	// Idempotency-Key replays the win. 1 to MaxReplicasAck; 0 (the default) does not wait.
	ReplicasAck int `json:"replicas_ack,omitempty"`

	// ReplicasAckTimeout bounds the wait for ReplicasAck; default 100ms, 1ms to 500ms.
	ReplicasAckTimeout caddy.Duration `json:"replicas_ack_timeout,omitempty"`

	// RebalanceInterval is how often this node levels the stock of the activities split into
	// buckets and completes transfers a crashed node left pending; default 250ms, 10ms to 10m.
	RebalanceInterval caddy.Duration `json:"rebalance_interval,omitempty"`

	logger *zap.Logger
}

// Bounds of the module's options.
const (
	// minRebalanceInterval and maxRebalanceInterval bound RebalanceInterval: below 10 ms the
	// rebalancer's reads of every bucket would cost the shards more than the buys; above 10
	// minutes it no longer helps a sale.
	minRebalanceInterval = 10 * time.Millisecond
	maxRebalanceInterval = 10 * time.Minute

	// maxPoolSize bounds PoolSize: more connections than this from one node is a typing error,
	// not a need (Redis's default maxclients, 10,000, is for every node together).
	maxPoolSize = 4096

	// defaultPoolSize is the least default PoolSize: 64 covers a sale of ten busy activities
	// (20 admission calls in flight) plus the result polls of as many buyers again, on any node.
	defaultPoolSize = 64

	// maxAckTimeout bounds ReplicasAckTimeout at the gateway: half of the Redis read timeout and
	// of the buy's one-second admission deadline, which also carry the batch's queueing and its
	// script.
	maxAckTimeout = 500 * time.Millisecond
)

// Client timeouts. An admission script runs in well under a millisecond; these bound how long a
// request waits on a Redis that is gone, so that the breaker opens instead.
const (
	dialTimeout = time.Second
	ioTimeout   = time.Second
)

// CaddyModule returns the Caddy module information.
func (Module) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "seckill.stores.redis",
		New: func() caddy.Module { return new(Module) },
	}
}

// Provision replaces the placeholders and validates the options. It connects to nothing: the app
// opens the store (OpenStore) once per configuration.
func (m *Module) Provision(ctx caddy.Context) error {
	m.logger = ctx.Logger()
	repl := caddy.NewReplacer()
	addrs := make([]string, 0, len(m.Addresses))
	for _, a := range m.Addresses {
		addrs = append(addrs, repl.ReplaceKnown(a, ""))
	}
	m.Addresses = addrs
	m.Username = repl.ReplaceKnown(m.Username, "")
	m.Password = repl.ReplaceKnown(m.Password, "")
	return m.validate()
}

// errPrefixBrace says why a key prefix may not hold a brace.
const errPrefixBrace = "a brace would change the Cluster hash tag that keeps an activity's keys in one slot"

// validate checks the options once placeholders are replaced; every message starts with the
// directive ("store redis: …").
func (m *Module) validate() error {
	timeout, interval := time.Duration(m.ReplicasAckTimeout), time.Duration(m.RebalanceInterval)
	switch {
	case len(m.Addresses) == 0:
		return errors.New("store redis: at least one address is required")
	case slices.Contains(m.Addresses, ""):
		return errors.New("store redis: an address is empty once placeholders are replaced: set the variable")
	case m.Cluster && m.SentinelMaster != "":
		return errors.New("store redis: cluster and sentinel are exclusive")
	case len(m.Addresses) > 1 && !m.Cluster && m.SentinelMaster == "":
		return errors.New("store redis: several addresses need cluster or sentinel")
	case m.Cluster && m.DB != 0:
		return errors.New("store redis: a cluster has only database 0")
	case m.DB < 0:
		return fmt.Errorf("store redis: db %d is negative", m.DB)
	case strings.ContainsAny(m.KeyPrefix, "{}"):
		return fmt.Errorf("store redis: key_prefix %q: %s", m.KeyPrefix, errPrefixBrace)
	case m.AdmitBatch < 0 || m.AdmitBatch > MaxAdmitBatch:
		return fmt.Errorf("store redis: admit_batch %d: want 1 (no grouping) to %d", m.AdmitBatch, MaxAdmitBatch)
	case m.PoolSize < 0 || m.PoolSize > maxPoolSize:
		return fmt.Errorf("store redis: pool_size %d: want 1 to %d", m.PoolSize, maxPoolSize)
	case m.ReplicasAck < 0 || m.ReplicasAck > MaxReplicasAck:
		return fmt.Errorf("store redis: replicas_ack %d: want 1 to %d replicas", m.ReplicasAck, MaxReplicasAck)
	case timeout != 0 && m.ReplicasAck == 0:
		return errors.New("store redis: replicas_ack_timeout needs replicas_ack")
	case timeout != 0 && (timeout < time.Millisecond || timeout > maxAckTimeout):
		return fmt.Errorf("store redis: replicas_ack timeout %v: want 1ms to %v", timeout, maxAckTimeout)
	case interval != 0 && (interval < minRebalanceInterval || interval > maxRebalanceInterval):
		return fmt.Errorf("store redis: rebalance_interval %v: want %v to %v", interval, minRebalanceInterval, maxRebalanceInterval)
	}
	return nil
}

// poolSize is PoolSize or its default.
func (m *Module) poolSize() int {
	if m.PoolSize > 0 {
		return m.PoolSize
	}
	return max(defaultPoolSize, 10*runtime.GOMAXPROCS(0))
}

// prefix is KeyPrefix or its default.
func (m *Module) prefix() string {
	if m.KeyPrefix == "" {
		return "seckill"
	}
	return m.KeyPrefix
}

// Directive names the store in messages by its servers, and its database and key prefix when
// they are not the defaults: two Redis stores of one process differ by those.
func (m *Module) Directive() string {
	d := "store redis " + strings.Join(m.Addresses, " ")
	if m.DB != 0 {
		d += fmt.Sprintf(" db %d", m.DB)
	}
	if m.KeyPrefix != "" {
		d += " key_prefix " + m.KeyPrefix
	}
	return d
}

// ForgottenSaleAdvice is what to do when the order database holds orders of a sale this store
// does not know.
func (m *Module) ForgottenSaleAdvice() string {
	return "this Redis does not hold that sale: it restarted without persistence, was flushed or " +
		"evicted the keys, or is another server, db or key_prefix than the sale's. Restore its data " +
		"(or point the store at it), or give a new sale a new activity id"
}

// PoolKey identifies the store this configuration opens: the whole configuration, so that a
// reload that changes any option gets a store of its own.
func (m *Module) PoolKey() string {
	b, _ := json.Marshal(m) // plain fields: it cannot fail
	return "redis:" + string(b)
}

// OpenStore connects to Redis and returns the store. Its client fails fast: at the edge a request
// waiting seconds for a dead Redis is worse than a 503 busy, and the breaker needs failures to
// open. One retry is kept, as every script is idempotent under it (request ids).
func (m *Module) OpenStore() (admission.Store, error) {
	// redisclient adds what a Cluster failover needs: go-redis alone keeps sending a dead
	// master's slots to its address for up to a minute (docs/failover.md).
	client := redisclient.New(&redis.UniversalOptions{
		Addrs:         m.Addresses,
		Username:      m.Username,
		Password:      m.Password,
		DB:            m.DB,
		MasterName:    m.SentinelMaster,
		IsClusterMode: m.Cluster,
		DialTimeout:   dialTimeout,
		DialerRetries: 1,
		PoolSize:      m.poolSize(),
		MaxRetries:    1,
		ReadTimeout:   ioTimeout,
		WriteTimeout:  ioTimeout,
		// go-redis's health check of every idle connection it hands out is kept on purpose: it
		// drops the connections a restart or failover left dead (docs/admission.md, "The
		// gateway's Redis client").
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err := client.Ping(ctx).Err()
	if err == nil {
		warnEvictionPolicy(ctx, client, m.logger)
	}
	cancel()
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("connect to redis %v: %w", m.Addresses, err)
	}
	st, err := New(client, Options{
		KeyPrefix: m.prefix(), AutoPipeline: m.AutoPipeline, AdmitBatch: m.AdmitBatch,
		ReplicasAck: m.ReplicasAck, ReplicasAckTimeout: time.Duration(m.ReplicasAckTimeout),
		RebalanceInterval: time.Duration(m.RebalanceInterval),
	})
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	return st, nil
}

// OpenExisting is OpenStore: a Redis store is shared, so reconcile reads it directly.
func (m *Module) OpenExisting() (admission.Store, error) { return m.OpenStore() }

// OnRedis marks the module as one whose store is on Redis (caddymodule.RedisBacked).
func (*Module) OnRedis() {}

// NeedsURLSecret says why the buy paths need a configured secret: every node must sign them alike.
func (m *Module) NeedsURLSecret() string { return "every node must sign buy paths alike" }

// SplitsStock reports that activities may be split into stock buckets over the shards.
func (m *Module) SplitsStock() bool { return true }

// KeepsLine reports that the store keeps a waiting room's line, in the activity's hash tag, shared
// by every gateway.
func (m *Module) KeepsLine() bool { return true }

// warnEvictionPolicy logs a warning when Redis may evict keys under memory pressure: the store's
// keys (stock, buyers, reservations) must never go, or a sale oversells, loses wins or cannot give
// unpaid items back (a release of an evicted reservation is answered not found and dropped). A
// server that refuses CONFIG (a managed Redis) is not checked. It returns the policy read ("" when
// it could not be read).
func warnEvictionPolicy(ctx context.Context, client redis.UniversalClient, logger *zap.Logger) string {
	m, err := client.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		logger.Debug("cannot read redis maxmemory-policy", zap.Error(err))
		return ""
	}
	policy := m["maxmemory-policy"]
	if policy != "" && policy != "noeviction" {
		logger.Warn("redis may evict the sale's keys under memory pressure: set maxmemory-policy noeviction",
			zap.String("maxmemory-policy", policy))
	}
	return policy
}

// Interface guards
var (
	_ caddy.Module      = (*Module)(nil)
	_ caddy.Provisioner = (*Module)(nil)
)
