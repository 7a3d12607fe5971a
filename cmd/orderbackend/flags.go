package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/internal/redisclient"
	"github.com/caddy-seckill/caddy-seckill/money"
	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

// common are the flags every subcommand needs: where the store and the order database are.
type common struct {
	redisAddrs    string
	redisPassword string
	redisDB       int
	redisSentinel string
	replicasAck   int
	keyPrefix     string
	autoPipeline  bool
	db            string
	partitions    int
}

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return n
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return d
	}
	return def
}

func envBool(name string, def bool) bool {
	if b, err := strconv.ParseBool(os.Getenv(name)); err == nil {
		return b
	}
	return def
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.redisAddrs, "redis", env("SECKILL_REDIS_ADDR", ""), "Redis address(es), comma-separated for a cluster or the sentinels [SECKILL_REDIS_ADDR]")
	fs.StringVar(&c.redisSentinel, "redis-sentinel", env("SECKILL_REDIS_SENTINEL", ""), "master name: -redis lists the sentinels that monitor it [SECKILL_REDIS_SENTINEL]")
	fs.StringVar(&c.redisPassword, "redis-password", env("SECKILL_REDIS_PASSWORD", ""), "Redis password [SECKILL_REDIS_PASSWORD]")
	fs.IntVar(&c.redisDB, "redis-db", envInt("SECKILL_REDIS_DB", 0), "Redis database number [SECKILL_REDIS_DB]")
	fs.StringVar(&c.keyPrefix, "key-prefix", env("SECKILL_KEY_PREFIX", "seckill"), "store key prefix, as configured at the edge [SECKILL_KEY_PREFIX]")
	fs.BoolVar(&c.autoPipeline, "redis-autopipeline", envBool("SECKILL_REDIS_AUTOPIPELINE", true),
		"send concurrent store calls together (the consumer writes a batch's result records at once) [SECKILL_REDIS_AUTOPIPELINE]")
	fs.IntVar(&c.replicasAck, "redis-replicas-ack", envInt("SECKILL_REDIS_REPLICAS_ACK", 0),
		"releases and reads of the wins queue wait (Redis WAIT, 100ms) until this many replicas have them, else are retried, as the gateway's store redis { replicas_ack } [SECKILL_REDIS_REPLICAS_ACK]")
	fs.StringVar(&c.db, "db", env("SECKILL_ORDERS_DB", ""), "order database: postgres://... or sqlite:PATH [SECKILL_ORDERS_DB]")
	fs.IntVar(&c.partitions, "partitions", envInt("SECKILL_ORDERS_PARTITIONS", 0),
		fmt.Sprintf("postgres: hash partitions of orders and payments by user, 1 (not partitioned) to %d; 0 is %d for a new database and "+
			"what an existing one has; another number than an existing database's is refused: `orderbackend partition` changes it [SECKILL_ORDERS_PARTITIONS]",
			orderbackend.MaxPartitions, orderbackend.DefaultPartitions))
}

// open connects to the store and the order database (applying migrations).
func (c *common) open(ctx context.Context) (admission.Store, orderbackend.Repository, error) {
	if c.redisAddrs == "" {
		return nil, nil, fmt.Errorf("-redis is required: the order backend reads the wins the edge queued in Redis")
	}
	kind, dsn, err := parseDB(c.db)
	if err != nil {
		return nil, nil, err
	}
	if err := c.checkPartitions(kind); err != nil {
		return nil, nil, err
	}
	// redisclient: the consumer goes on reading a failed-over Cluster master's stream on its
	// replica within about a second of the promotion (docs/failover.md).
	client := redisclient.New(&redis.UniversalOptions{
		Addrs: strings.Split(c.redisAddrs, ","), Password: c.redisPassword, DB: c.redisDB,
		MasterName: c.redisSentinel,
	})
	// The auto-pipeliner groups the result reads of a batch's concurrent publishes: about a
	// quarter less redis-server CPU per order (orderbackend/README.md, "Batches").
	store, err := redisstore.New(client, redisstore.Options{
		KeyPrefix: c.keyPrefix, AutoPipeline: c.autoPipeline, ReplicasAck: c.replicasAck,
	})
	if err != nil {
		_ = client.Close()
		return nil, nil, err
	}
	repo, err := orderbackend.OpenRepositoryWith(ctx, kind, dsn, orderbackend.PostgresOptions{Partitions: c.partitions})
	if err != nil {
		_ = store.Close()
		return nil, nil, err
	}
	return store, repo, nil
}

// checkPartitions checks -partitions before anything is opened.
func (c *common) checkPartitions(kind string) error {
	switch {
	case c.partitions < 0 || c.partitions > orderbackend.MaxPartitions:
		return fmt.Errorf("-partitions %d: want 1 to %d (0: the default)", c.partitions, orderbackend.MaxPartitions)
	case c.partitions > 1 && kind != "postgres":
		return fmt.Errorf("-partitions %d: partitions is a postgres option (SQLite has one table)", c.partitions)
	}
	return nil
}

// parseDB splits "postgres://..." / "postgresql://..." / "sqlite:PATH" into a repository kind and
// its data source.
func parseDB(s string) (kind, dsn string, err error) {
	switch {
	case strings.HasPrefix(s, "postgres://"), strings.HasPrefix(s, "postgresql://"):
		return "postgres", s, nil
	case strings.HasPrefix(s, "sqlite:") && len(s) > len("sqlite:"):
		return "sqlite", strings.TrimPrefix(s, "sqlite:"), nil
	case s == "":
		return "", "", fmt.Errorf("-db is required (postgres://... or sqlite:PATH)")
	}
	return "", "", fmt.Errorf("-db %q: want postgres://... or sqlite:PATH", s)
}

// listings are the activities' prices and titles, from the repeatable flags -price ID=AMOUNT:CURRENCY
// and -title ID=TITLE: the standalone backend does not read the gateway's Caddyfile, so each
// priced activity is named here too (with the same price as the gateway's `price`).
type listings map[string]orderbackend.Listing

// priceFlag is -price.
type priceFlag struct{ l listings }

func (f priceFlag) String() string { return "" }

// Set parses ID=AMOUNT:CURRENCY ("phone-1001=199.00:USD"); an activity priced twice is an error.
func (f priceFlag) Set(v string) error {
	id, p, ok := strings.Cut(v, "=")
	amount, currency, ok2 := strings.Cut(p, ":")
	if !ok || !ok2 || id == "" {
		return fmt.Errorf("%q: want ACTIVITY=AMOUNT:CURRENCY, e.g. phone-1001=199.00:USD", v)
	}
	price, err := money.Parse(amount, currency)
	if err != nil {
		return fmt.Errorf("%q: %w", v, err)
	}
	l := f.l[id]
	if !l.Price.IsZero() {
		return fmt.Errorf("%q: activity %s has a price already", v, id)
	}
	l.Price = price
	f.l[id] = l
	return nil
}

// titleFlag is -title.
type titleFlag struct{ l listings }

func (f titleFlag) String() string { return "" }

// Set parses ID=TITLE; an activity titled twice is an error.
func (f titleFlag) Set(v string) error {
	id, title, ok := strings.Cut(v, "=")
	if !ok || id == "" || strings.TrimSpace(title) == "" {
		return fmt.Errorf("%q: want ACTIVITY=TITLE", v)
	}
	l := f.l[id]
	if l.Title != "" {
		return fmt.Errorf("%q: activity %s has a title already", v, id)
	}
	l.Title = title
	f.l[id] = l
	return nil
}

func (l listings) register(fs *flag.FlagSet) {
	fs.Var(priceFlag{l}, "price", "an activity's unit price, ACTIVITY=AMOUNT:CURRENCY (ISO 4217), e.g. phone-1001=199.00:USD; repeat per activity. Orders carry it and the provider charges it")
	fs.Var(titleFlag{l}, "title", "an activity's title, ACTIVITY=TITLE; repeat per activity")
}

// listing is the consumer's Listing.
func (l listings) listing(activity string) orderbackend.Listing { return l[activity] }
