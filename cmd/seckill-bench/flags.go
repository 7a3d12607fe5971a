package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"
)

// config is the bench's command line.
type config struct {
	// The sale.
	scenario   string
	users      int
	activities int
	stock      int64
	limit      int64
	buckets    int
	actPrefix  string

	// The load.
	concurrency int
	rate        float64
	maxInflight int
	soak        time.Duration
	slice       time.Duration
	timeout     time.Duration
	pollTimeout time.Duration
	retries     int
	tokenTTL    time.Duration

	// The gateway.
	gatewayBin   string
	build        bool
	target       string
	admin        string
	gatewayPID   int
	prefix       string
	baselinePath string
	jwtSecret    string
	ipRate       string
	userRate     string
	store        string
	localFsync   string // store local { fsync ... }; "" for the default
	redisAddr    string
	redisBin     string
	redisCluster bool
	autoPipeline bool
	admitBatch   int
	orders       string
	ordersBin    string
	reconcileDB  string

	// gateway-config only.
	listen      string
	adminListen string

	// Output.
	workDir string
	keep    bool
	jsonOut string
	svgOut  string
	window  time.Duration
	quiet   bool
	pprof   string
	pprofD  time.Duration
	trace   bool

	// gatewayEnv is added to the environment of the gateway the bench starts (GODEBUG=gctrace=1,
	// GOGC=..., GOMAXPROCS=...), for diagnosis.
	gatewayEnv envList
}

// envList is a repeatable NAME=VALUE flag.
type envList []string

func (l *envList) String() string { return strings.Join(*l, " ") }

func (l *envList) Set(s string) error {
	if name, _, ok := strings.Cut(s, "="); !ok || name == "" {
		return fmt.Errorf("%q: want NAME=VALUE", s)
	}
	*l = append(*l, s)
	return nil
}

func (c *config) register(fs *flag.FlagSet) {
	fs.StringVar(&c.scenario, "scenario", "closed", "closed (-concurrency clients), open (-rate users/s, latency from the intended send time) or burst (every user presses at the start instant)")
	fs.IntVar(&c.users, "users", 20000, "distinct users (each with its own token and address); the classic run is 1000000")
	fs.IntVar(&c.activities, "activities", 10, "activities; user i buys in activity i mod activities")
	fs.Int64Var(&c.stock, "stock", 1000, "items per activity")
	fs.Int64Var(&c.limit, "limit", 1, "items per user and activity")
	fs.IntVar(&c.buckets, "buckets", 0, "store redis: split every activity's stock into this many buckets (the activity's buckets option; 2 to 256, at most -stock); 0 does not split")
	fs.StringVar(&c.actPrefix, "activity-prefix", "bench-", "activity ids are this prefix and a number")

	fs.IntVar(&c.concurrency, "concurrency", 64, "concurrent clients of the closed loop, the burst's reveal step and the soak")
	fs.Float64Var(&c.rate, "rate", 1000, "open loop: users arriving per second")
	fs.IntVar(&c.maxInflight, "max-inflight", 1000, "open loop and burst: most users in flight at once (later arrivals wait, and their wait counts in their latency)")
	fs.DurationVar(&c.soak, "soak", 10*time.Second, "after the sell-out, keep pressing buy this long (half of it against respond, alternating every -slice); 0 skips the soak")
	fs.DurationVar(&c.slice, "slice", time.Second, "soak: how long each target is driven before switching")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "per request")
	fs.DurationVar(&c.pollTimeout, "poll-timeout", 30*time.Second, "how long a winner polls its result before the win counts as unconfirmed")
	fs.IntVar(&c.retries, "retries", 2, "retries of a request that got no answer, 429 or 503 (after Retry-After); a buy is retried with the same Idempotency-Key")
	fs.DurationVar(&c.tokenTTL, "token-ttl", 2*time.Hour, "lifetime of the minted tokens")

	fs.StringVar(&c.gatewayBin, "gateway-bin", "", "Caddy binary with the seckill plugin: the bench writes its config, starts it, measures its CPU and memory, and stops it")
	fs.BoolVar(&c.build, "build", false, "build cmd/caddy (and cmd/orderbackend with -orders) from this module into the work directory first; needs go")
	fs.StringVar(&c.target, "target", "", "base URL of an already running gateway (instead of -gateway-bin); it must serve the bench's config (see gateway-config)")
	fs.StringVar(&c.admin, "admin", "", "Caddy admin endpoint of -target, for /metrics and the admin API (e.g. http://127.0.0.1:2019)")
	fs.IntVar(&c.gatewayPID, "gateway-pid", 0, "process id of -target, for its CPU and memory")
	fs.StringVar(&c.prefix, "prefix", "/seckill", "where the seckill handler is mounted")
	fs.StringVar(&c.baselinePath, "baseline-path", "/baseline", "where the respond route is mounted; requests go to this path + the seckill path")
	fs.StringVar(&c.jwtSecret, "jwt-secret", "", "HS256 secret of the tokens (32+ bytes); default: random, written into the generated config")
	fs.StringVar(&c.ipRate, "ip-rate", "20/s burst 40", `IP rate limit of the generated config ("" for none)`)
	fs.StringVar(&c.userRate, "user-rate", "10/s burst 5", `user rate limit of the generated config ("" for none)`)
	fs.StringVar(&c.store, "store", "memory", "memory, local (the durable single-node store, in the work directory) or redis")
	fs.StringVar(&c.localFsync, "local-fsync", "", "store local: the gateway's fsync (always or no); empty keeps the gateway's default (no)")
	fs.StringVar(&c.redisAddr, "redis-addr", "", "store redis: an existing server (default: start a private redis-server on a free port)")
	fs.BoolVar(&c.redisCluster, "redis-cluster", false, "store redis: -redis-addr lists the nodes of a running Redis Cluster, comma-separated (e.g. with -buckets, to spread a split activity over its masters)")
	fs.StringVar(&c.redisBin, "redis-bin", "redis-server", "store redis: the redis-server binary to start")
	fs.BoolVar(&c.autoPipeline, "redis-autopipeline", false, "store redis: turn on the gateway's auto_pipeline option (go-redis's auto-pipeliner for the hot calls)")
	fs.IntVar(&c.admitBatch, "redis-admit-batch", 0, "store redis: the gateway's admit_batch (1 turns group admission off); 0 keeps the gateway's default")
	fs.StringVar(&c.orders, "orders", "none", "the order backend: none; embedded (the gateway's orders option, SQLite in the work directory; reconcile through the admin API); standalone (cmd/orderbackend started by the bench, store redis only). With one, winners poll until their order exists and reconcile runs at the end")
	fs.StringVar(&c.ordersBin, "orderbackend-bin", "", "-orders standalone: the cmd/orderbackend binary (-build builds it)")
	fs.StringVar(&c.reconcileDB, "reconcile-db", "", "with -target and -redis-addr: the order database (postgres://... or sqlite:PATH) to reconcile at the end; with -target and -orders embedded the admin API is asked instead")

	fs.StringVar(&c.listen, "listen", "127.0.0.1:8080", "gateway-config: the site address")
	fs.StringVar(&c.adminListen, "admin-listen", "127.0.0.1:2019", "gateway-config: the admin address")

	fs.StringVar(&c.workDir, "work-dir", "", "where configs, logs and databases go (default: a new temporary directory, removed after a successful run)")
	fs.BoolVar(&c.keep, "keep", false, "keep the work directory")
	fs.StringVar(&c.jsonOut, "json", "seckill-bench.json", `JSON report ("" for none)`)
	fs.StringVar(&c.svgOut, "svg", "seckill-bench.svg", `latency-over-time chart ("" for none)`)
	fs.DurationVar(&c.window, "window", 500*time.Millisecond, "chart resolution")
	fs.BoolVar(&c.quiet, "quiet", false, "no progress line")
	fs.StringVar(&c.pprof, "pprof", "", "save the gateway's profiles into this directory (from Caddy's admin /debug/pprof/): CPU over the first -pprof-seconds of the sale (or burst) and of the soak, heap at the end; "+
		"with -orders standalone started by the bench, also the order backend's CPU profiles of the same seconds (orderbackend-<phase>-cpu.pprof, from its -metrics-listen)")
	fs.Var(&c.gatewayEnv, "gateway-env", "NAME=VALUE added to the environment of the gateway the bench starts, e.g. GODEBUG=gctrace=1 (its output goes to gateway.log in the work directory: add -keep); repeatable")
	fs.DurationVar(&c.pprofD, "pprof-seconds", 5*time.Second, "length of each CPU profile")
	fs.BoolVar(&c.trace, "trace", false, "with -pprof: also save an execution trace of the same seconds (go tool trace; where requests waited)")
}

// validateBuckets checks -buckets against the store and the stock, as the gateway would at load.
func (c *config) validateBuckets() error {
	switch {
	case c.buckets == 0:
		return nil
	case c.buckets < 2 || c.buckets > 256:
		return fmt.Errorf("-buckets %d: want 2 to 256, or 0 for no split", c.buckets)
	case int64(c.buckets) > c.stock:
		return fmt.Errorf("-buckets %d is more than -stock %d: every bucket needs an item", c.buckets, c.stock)
	case c.store != "redis":
		return errors.New("-buckets needs -store redis (the buckets spread an activity over Redis hash tags)")
	}
	return nil
}

// validateCluster checks -redis-cluster: it names a running cluster, which the bench does not
// start, and only the gateway talks to it.
func (c *config) validateCluster() error {
	switch {
	case !c.redisCluster:
		return nil
	case c.store != "redis" || c.redisAddr == "":
		return errors.New("-redis-cluster needs -store redis and -redis-addr with the cluster's nodes")
	case c.orders == "standalone":
		return errors.New("-redis-cluster: the standalone order backend the bench starts takes one Redis address; use -orders embedded or none")
	}
	return nil
}

// validate checks the flags of a run.
func (c *config) validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	switch c.scenario {
	case "closed", "open", "burst":
	default:
		bad("-scenario %q: want closed, open or burst", c.scenario)
	}
	if c.users < 1 {
		bad("-users must be at least 1")
	}
	if c.activities < 1 {
		bad("-activities must be at least 1")
	}
	if c.stock < 1 || c.limit < 1 {
		bad("-stock and -limit must be at least 1")
	}
	if c.concurrency < 1 || c.maxInflight < 1 {
		bad("-concurrency and -max-inflight must be at least 1")
	}
	if c.scenario == "open" && c.rate <= 0 {
		bad("-rate must be positive")
	}
	if c.slice <= 0 || c.window <= 0 || c.timeout <= 0 {
		bad("-slice, -window and -timeout must be positive")
	}
	if c.retries < 0 {
		bad("-retries must not be negative")
	}
	switch c.store {
	case "memory", "local", "redis":
	default:
		bad("-store %q: want memory, local or redis", c.store)
	}
	switch {
	case c.localFsync != "" && c.store != "local":
		bad("-local-fsync needs -store local")
	case c.localFsync != "" && c.localFsync != "always" && c.localFsync != "no":
		bad("-local-fsync %q: want always or no", c.localFsync)
	case c.localFsync != "" && c.target != "":
		bad("-local-fsync configures the gateway the bench starts: with -target, set it on the running gateway")
	}
	if err := c.validateBuckets(); err != nil {
		errs = append(errs, err)
	}
	if err := c.validateCluster(); err != nil {
		errs = append(errs, err)
	}
	if c.admitBatch < 0 || c.admitBatch > 1024 {
		bad("-redis-admit-batch %d: want 1 (no grouping) to 1024, or 0 for the gateway's default", c.admitBatch)
	}
	// Options of the gateway's store, or of the gateway the bench starts, are refused where they
	// would be ignored: a run that silently measured the default would be reported as the variant.
	if c.store != "redis" && (c.autoPipeline || c.admitBatch != 0) {
		bad("-redis-autopipeline and -redis-admit-batch need -store redis")
	}
	if c.target != "" && (c.autoPipeline || c.admitBatch != 0 || c.buckets != 0 || c.redisCluster || len(c.gatewayEnv) > 0) {
		bad("-redis-autopipeline, -redis-admit-batch, -buckets, -redis-cluster and -gateway-env configure the gateway the bench starts: with -target, set them on the running gateway")
	}
	switch c.orders {
	case "none", "embedded":
	case "standalone":
		if c.store != "redis" {
			bad("-orders standalone needs -store redis: the standalone order backend reads the wins from Redis (use -orders embedded with the memory or local store)")
		}
		if c.ordersBin == "" && !c.build && c.target == "" {
			bad("-orders standalone needs -orderbackend-bin PATH or -build")
		}
		if c.target != "" && c.reconcileDB == "" {
			// Without it the run could not reconcile, and would pass without having checked the orders.
			bad("-orders standalone with -target needs -reconcile-db: the order database your order backend writes (postgres://... or sqlite:PATH)")
		}
	default:
		bad("-orders %q: want none, embedded or standalone", c.orders)
	}
	started := c.gatewayBin != "" || c.build
	switch {
	case started && c.target != "":
		bad("give either -gateway-bin/-build (the bench starts the gateway) or -target (it is running), not both")
	case !started && c.target == "":
		bad("give -gateway-bin PATH or -build (the bench starts the gateway), or -target URL")
	case c.target != "" && c.jwtSecret == "":
		bad("-target needs -jwt-secret: the secret the running gateway verifies tokens with")
	}
	if c.jwtSecret != "" && len(c.jwtSecret) < 32 {
		bad("-jwt-secret must be at least 32 bytes for HS256")
	}
	if c.trace && c.pprof == "" {
		bad("-trace needs -pprof DIR: the trace is saved beside the profiles")
	}
	if !strings.HasPrefix(c.prefix, "/") || !strings.HasPrefix(c.baselinePath, "/") {
		bad("-prefix and -baseline-path must start with /")
	}
	return errors.Join(errs...)
}

// activityIDs returns the ids of the bench's activities.
func (c *config) activityIDs() []string {
	ids := make([]string, c.activities)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%d", c.actPrefix, i)
	}
	return ids
}
