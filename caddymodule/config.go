package caddymodule

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/ratelimit"
)

// StoreConfig selects and configures the admission store every node of a sale shares.
type StoreConfig struct {
	// Type is "memory" (the default: one node, not durable), "local" (one node, durable in Dir)
	// or "redis".
	Type string `json:"type,omitempty"`

	// Dir is the folder of store local (relative to Caddy's working directory); one process at a
	// time may use it. Placeholders such as {env.SECKILL_DATA} are replaced at provisioning.
	Dir string `json:"dir,omitempty"`

	// Fsync is store local's flush policy, in Redis appendfsync words: "no" (the default) hands
	// each group commit to the operating system before the answers leave, which survives a crash
	// of the process; "always" also flushes it to the device, which survives a power loss.
	Fsync string `json:"fsync,omitempty"`

	// Addresses of the Redis server (one), of the cluster nodes (with Cluster) or of the
	// sentinels (with SentinelMaster), as host:port; a single server on the same host may be a
	// Unix socket's path (it starts with "/"), which saves the loopback TCP stack's work.
	Addresses []string `json:"addresses,omitempty"`

	// Username and Password authenticate to Redis (ACL user, or password only). Placeholders
	// such as {env.REDIS_PASSWORD} are replaced when the app is provisioned.
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

	// AutoPipeline batches concurrent hot-path calls (admit, release, remaining, results) onto
	// shared connections with go-redis's auto-pipeliner; off unless asked for, as go-redis marks
	// it experimental (docs/admission.md, "The gateway's Redis client").
	AutoPipeline bool `json:"auto_pipeline,omitempty"`

	// AdmitBatch is the most concurrent buys for one activity that share one admission script
	// call (group admission: while one call is in flight the next buys queue and go together in
	// the next one); default 64, at most 1024. 1 turns grouping off. Grouping multiplies what one
	// Redis shard admits per second; see docs/admission.md.
	AdmitBatch int `json:"admit_batch,omitempty"`

	// PoolSize is the size of this node's main connection pool to each Redis server; default
	// max(64, 10 × GOMAXPROCS), since the library's default is used up by ten busy activities
	// (docs/admission.md, "The gateway's Redis client").
	PoolSize int `json:"pool_size,omitempty"`

	// ReplicasAck, when positive, makes every admission script call (one per group of buys) and
	// every release wait until this many replicas have its writes (Redis WAIT) before answering,
	// at most ReplicasAckTimeout; buys whose win the replicas did not confirm in time are
	// answered 503 busy. Their win is on the master, so a retry with the same Idempotency-Key
	// replays it. It closes the window in which a master's failover loses acknowledged wins;
	// see docs/admission.md. 1 to 16; 0 (the default) does not wait.
	ReplicasAck int `json:"replicas_ack,omitempty"`

	// ReplicasAckTimeout bounds the wait for ReplicasAck; default 100ms, 1ms to 500ms, so that
	// WAIT's answer comes well inside the Redis read timeout and the buy's one-second admission
	// deadline.
	ReplicasAckTimeout caddy.Duration `json:"replicas_ack_timeout,omitempty"`

	// RebalanceInterval is how often this node levels the stock of the activities split into
	// buckets (ActivityConfig.Buckets) and completes transfers a crashed node left pending;
	// default 250ms, 10ms to 10m. Shorter reads every bucket more often; longer leaves more of
	// the levelling to the buys' own pulls.
	RebalanceInterval caddy.Duration `json:"rebalance_interval,omitempty"`
}

// Bounds of RebalanceInterval: below 10 ms the rebalancer's reads of every bucket would cost
// the shards more than the buys; above 10 minutes it no longer helps a sale.
const (
	minRebalanceInterval = 10 * time.Millisecond
	maxRebalanceInterval = 10 * time.Minute
)

// maxReplicasAckTimeout bounds ReplicasAckTimeout: half of the Redis read timeout and of the
// admission deadline (both 1 s), which also carry the batch's queueing and its script.
const maxReplicasAckTimeout = 500 * time.Millisecond

// maxPoolSize bounds PoolSize: more connections than this from one node is a typing error, not a
// need (Redis's default maxclients, 10,000, is for every node together).
const maxPoolSize = 4096

// Store types.
const (
	storeMemory = "memory"
	storeLocal  = "local"
	storeRedis  = "redis"
)

// Fsync policies of store local.
const (
	fsyncNo     = "no"
	fsyncAlways = "always"
)

// poolSize is PoolSize or its default.
func (s *StoreConfig) poolSize() int {
	if s.PoolSize > 0 {
		return s.PoolSize
	}
	return max(defaultPoolSize, 10*runtime.GOMAXPROCS(0))
}

// defaultPoolSize is the least default PoolSize: 64 covers a sale of ten busy activities
// (20 admission calls in flight) plus the result polls of as many buyers again, on any node.
const defaultPoolSize = 64

func (s *StoreConfig) typ() string {
	if s == nil || s.Type == "" {
		return storeMemory
	}
	return s.Type
}

// validate checks the store configuration after placeholders were replaced.
func (s *StoreConfig) validate() error {
	switch s.typ() {
	case storeMemory:
		if s != nil && s.hasRedisOptions() {
			return errors.New("store memory takes no redis options")
		}
		if s != nil && (s.Dir != "" || s.Fsync != "") {
			return errors.New("store memory takes no folder and no fsync: that is store local")
		}
		return nil
	case storeLocal:
		return s.validateLocal()
	case storeRedis:
	default:
		return fmt.Errorf("unknown store type %q: want memory, local or redis", s.Type)
	}
	switch {
	case s.Dir != "" || s.Fsync != "":
		return errors.New("store redis takes no folder and no fsync (configure appendfsync in Redis)")
	case len(s.Addresses) == 0:
		return errors.New("store redis: at least one address is required")
	case s.Cluster && s.SentinelMaster != "":
		return errors.New("store redis: cluster and sentinel are exclusive")
	case len(s.Addresses) > 1 && !s.Cluster && s.SentinelMaster == "":
		return errors.New("store redis: several addresses need cluster or sentinel")
	case s.Cluster && s.DB != 0:
		return errors.New("store redis: a cluster has only database 0")
	case s.DB < 0:
		return fmt.Errorf("store redis: db %d is negative", s.DB)
	case s.AdmitBatch < 0 || s.AdmitBatch > redisstore.MaxAdmitBatch:
		return fmt.Errorf("store redis: admit_batch %d: want 1 (no grouping) to %d", s.AdmitBatch, redisstore.MaxAdmitBatch)
	case s.PoolSize < 0 || s.PoolSize > maxPoolSize:
		return fmt.Errorf("store redis: pool_size %d: want 1 to %d", s.PoolSize, maxPoolSize)
	case s.ReplicasAck < 0 || s.ReplicasAck > redisstore.MaxReplicasAck:
		return fmt.Errorf("store redis: replicas_ack %d: want 1 to %d replicas", s.ReplicasAck, redisstore.MaxReplicasAck)
	case s.ReplicasAckTimeout != 0 && s.ReplicasAck == 0:
		return errors.New("store redis: replicas_ack_timeout needs replicas_ack")
	case s.ReplicasAckTimeout != 0 && (time.Duration(s.ReplicasAckTimeout) < time.Millisecond || time.Duration(s.ReplicasAckTimeout) > maxReplicasAckTimeout):
		return fmt.Errorf("store redis: replicas_ack timeout %v: want 1ms to %v", time.Duration(s.ReplicasAckTimeout), maxReplicasAckTimeout)
	case s.RebalanceInterval != 0 && (time.Duration(s.RebalanceInterval) < minRebalanceInterval || time.Duration(s.RebalanceInterval) > maxRebalanceInterval):
		return fmt.Errorf("store redis: rebalance_interval %v: want %v to %v", time.Duration(s.RebalanceInterval), minRebalanceInterval, maxRebalanceInterval)
	}
	return nil
}

// hasRedisOptions reports whether an option only store redis takes is set.
func (s *StoreConfig) hasRedisOptions() bool {
	return len(s.Addresses) > 0 || s.Password != "" || s.Username != "" || s.DB != 0 ||
		s.KeyPrefix != "" || s.SentinelMaster != "" || s.Cluster || s.AutoPipeline || s.AdmitBatch != 0 || s.PoolSize != 0 ||
		s.ReplicasAck != 0 || s.ReplicasAckTimeout != 0 || s.RebalanceInterval != 0
}

// fsyncAlways reports whether store local flushes every group commit to the device.
func (s *StoreConfig) fsyncAlways() bool { return s.Fsync == fsyncAlways }

// fsyncWord is the fsync policy in effect, for messages.
func (s *StoreConfig) fsyncWord() string {
	if s.fsyncAlways() {
		return fsyncAlways
	}
	return fsyncNo
}

// directive names the store as the configuration gives it, for error messages.
func (s *StoreConfig) directive() string {
	if s.typ() == storeLocal {
		return "store local " + s.Dir
	}
	return "store " + s.typ()
}

// validateLocal checks a store local configuration: a folder, a known fsync word, no Redis option.
func (s *StoreConfig) validateLocal() error {
	switch {
	case strings.TrimSpace(s.Dir) == "":
		return errors.New("store local: the folder is required, e.g. store local ./seckill-data")
	case s.Fsync != "" && s.Fsync != fsyncNo && s.Fsync != fsyncAlways:
		return fmt.Errorf("store local: fsync %q: want always or no", s.Fsync)
	case s.hasRedisOptions():
		return errors.New("store local takes no redis options")
	}
	return nil
}

// JWTConfig configures how buyers' bearer tokens are verified.
type JWTConfig struct {
	// Algorithms accepted, pinned (e.g. HS256, RS256, ES256, EdDSA); a token signed with any
	// other algorithm is refused.
	Algorithms []string `json:"algorithms,omitempty"`

	// HMACSecret verifies HS* tokens. Placeholders such as {env.SECKILL_JWT_SECRET} are replaced
	// when the app is provisioned.
	HMACSecret string `json:"hmac_secret,omitempty"`

	// PublicKeyFiles are PEM files of the keys that verify RS*, PS*, ES* and EdDSA tokens.
	PublicKeyFiles []string `json:"public_key_files,omitempty"`

	// JWKSURL is fetched (and refreshed) for the verification keys.
	JWKSURL string `json:"jwks_url,omitempty"`

	// JWKSMinRefresh is the least time between two fetches of the JWKS (a token with an unknown
	// kid asks for one); default 30s.
	JWKSMinRefresh caddy.Duration `json:"jwks_min_refresh,omitempty"`

	// Issuer and Audience, when set, must be in the token's iss and aud claims.
	Issuer   string `json:"issuer,omitempty"`
	Audience string `json:"audience,omitempty"`

	// Leeway tolerates this much clock skew on exp, nbf and iat.
	Leeway caddy.Duration `json:"leeway,omitempty"`

	// UserClaim names the claim holding the user id; default "sub".
	UserClaim string `json:"user_claim,omitempty"`
}

// RateLimits are the per-client-IP and per-user rate limits; a nil limit means none.
type RateLimits struct {
	IP   *RateLimitConfig `json:"ip,omitempty"`
	User *RateLimitConfig `json:"user,omitempty"`
}

// RateLimitConfig is one rate limit.
type RateLimitConfig struct {
	// Rate is "<events>/<period>", e.g. "20/s", "100/m", "10/100ms".
	Rate string `json:"rate"`

	// Burst is the bucket size; default the number of events.
	Burst int `json:"burst,omitempty"`

	// Distributed enforces the limit across every node with a GCRA in Redis (user limit and
	// store redis only), on top of the node-local bucket.
	Distributed bool `json:"distributed,omitempty"`
}

// parse returns the rate the configuration describes.
func (c *RateLimitConfig) parse() (ratelimit.Rate, error) {
	r, err := ratelimit.ParseRate(c.Rate)
	if err != nil {
		return ratelimit.Rate{}, err
	}
	if c.Burst != 0 {
		r.Burst = c.Burst
		if err := r.Validate(); err != nil {
			return ratelimit.Rate{}, fmt.Errorf("rate %q burst %d: %w", c.Rate, c.Burst, err)
		}
	}
	return r, nil
}

// ActivityConfig defines one sale in the configuration.
type ActivityConfig struct {
	// Stock is the number of items on sale.
	Stock int64 `json:"stock"`

	// Limit is the most items one user may buy; default 1.
	Limit int64 `json:"limit,omitempty"`

	// Start and End bound the sale window (RFC 3339).
	Start time.Time `json:"start,omitzero"`
	End   time.Time `json:"end"`

	// StartIn, instead of Start, opens the sale this long after the activity is first defined in
	// the store. The store keeps that start: a reload, a restart with store redis, or another node
	// defining the same activity later never moves it (a restart with store memory is a new sale).
	StartIn caddy.Duration `json:"start_in,omitempty"`

	// Reveal is how long before Start the hashed buy path is handed out.
	Reveal caddy.Duration `json:"reveal,omitempty"`

	// PayWithin is how long a winner has to pay; default 15m.
	PayWithin caddy.Duration `json:"pay_within,omitempty"`

	// Buckets splits the stock into this many buckets under as many Redis hash tags, so that one
	// hot activity's admissions spread over a Redis Cluster's shards instead of one (store redis
	// only; 2 to 256, at most the stock). Every call still sees one activity; see README.
	Buckets int `json:"buckets,omitempty"`
}

// minBuckets is the least split of ActivityConfig.Buckets (at most admission.MaxBuckets); left
// out, the stock stays in one place.
const minBuckets = 2

// Defaults of an activity definition.
const (
	defaultLimit     = 1
	defaultPayWithin = 15 * time.Minute
)

// definition returns the store definition of activity id.
func (c *ActivityConfig) definition(id string) admission.Activity {
	a := admission.Activity{
		ID:        id,
		Stock:     c.Stock,
		Limit:     c.Limit,
		Start:     c.Start,
		End:       c.End,
		PayWithin: time.Duration(c.PayWithin),
		Buckets:   c.Buckets,
	}
	if a.Limit == 0 {
		a.Limit = defaultLimit
	}
	if a.PayWithin == 0 {
		a.PayWithin = defaultPayWithin
	}
	return a
}

// validate checks what the store does not: the id, the window, the reveal lead, the pay window
// and the buckets. Every field is checked whatever the others hold (a start_in window included),
// and an error names the option at fault.
func (c *ActivityConfig) validate(id string) error {
	if !admission.ValidActivityID(id) {
		return fmt.Errorf("activity id %q: want 1-%d of [A-Za-z0-9._-]", id, admission.MaxActivityIDLen)
	}
	if c == nil {
		return fmt.Errorf("activity %s: empty definition", id)
	}
	switch {
	case c.Stock < 0:
		return fmt.Errorf("activity %s: stock %d is negative", id, c.Stock)
	case c.Limit < 0:
		return fmt.Errorf("activity %s: limit %d is negative", id, c.Limit)
	case c.Reveal < 0:
		return fmt.Errorf("activity %s: reveal %s is negative", id, time.Duration(c.Reveal))
	case c.PayWithin < 0:
		return fmt.Errorf("activity %s: pay_within %s is negative", id, time.Duration(c.PayWithin))
	}
	if err := c.validateWindow(id); err != nil {
		return err
	}
	return c.validateBuckets(id)
}

// validateWindow checks start, start_in and end. With start_in the start is known only when the
// activity is defined; defineActivity checks the end against it then.
func (c *ActivityConfig) validateWindow(id string) error {
	switch {
	case c.StartIn < 0:
		return fmt.Errorf("activity %s: start_in %s is negative", id, time.Duration(c.StartIn))
	case c.StartIn > 0 && !c.Start.IsZero():
		return fmt.Errorf("activity %s: start and start_in are exclusive: give one", id)
	case (c.Start.IsZero() && c.StartIn == 0) || c.End.IsZero():
		return fmt.Errorf("activity %s: start (or start_in) and end are required", id)
	case c.StartIn == 0 && !c.End.After(c.Start):
		return fmt.Errorf("activity %s: end %s is not after start %s", id,
			c.End.Format(time.RFC3339), c.Start.Format(time.RFC3339))
	}
	return nil
}

// validateBuckets checks the bucket count against its bounds and the stock.
func (c *ActivityConfig) validateBuckets(id string) error {
	switch {
	case c.Buckets == 0:
		return nil
	case c.Buckets < minBuckets || c.Buckets > admission.MaxBuckets:
		return fmt.Errorf("activity %s: buckets %d: want %d to %d (leave it out for one)", id, c.Buckets, minBuckets, admission.MaxBuckets)
	case int64(c.Buckets) > c.Stock:
		return fmt.Errorf("activity %s: buckets %d is more than the stock %d: every bucket needs an item", id, c.Buckets, c.Stock)
	}
	return nil
}

// validateStore checks what the activity needs of the store: buckets live in Redis.
func (c *ActivityConfig) validateStore(id string, s *StoreConfig) error {
	if c.Buckets > 1 && s.typ() != storeRedis {
		return fmt.Errorf("activity %s: buckets %d needs store redis (it spreads the stock over Redis "+
			"shards); %s keeps an activity in one place: remove buckets", id, c.Buckets, s.directive())
	}
	return nil
}
