// Command seckill-bench is the flash-sale pressure test of caddy-seckill: it sells A activities × S
// items to N distinct users (each with a pre-minted JWT and its own client address) through a
// running gateway, sends the very same requests to a Caddy `respond` route in the same process as
// a yardstick, reports throughput, latency percentiles, answers by code, the gateway's metrics,
// CPU and memory, and ends by checking that nothing was oversold, lost or undersold.
//
//	go run ./cmd/seckill-bench -build                         # builds cmd/caddy, runs everything
//	go run ./cmd/seckill-bench -gateway-bin /tmp/caddy -scenario burst -users 1000000
//	go run ./cmd/seckill-bench gateway-config > Caddyfile.bench   # for a gateway you start
//	go run ./cmd/seckill-bench waits prof/sale.trace              # where requests waited (-pprof prof -trace)
//
// The exit status is 0 when every invariant holds, 1 when one is violated, 2 on a usage error and
// 3 when the run could not be carried out.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// Exit statuses.
const (
	exitOK        = 0
	exitViolation = 1
	exitUsage     = 2
	exitError     = 3
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// cli dispatches the subcommands: run (the default), gateway-config, waits, wrk-requests and
// check-port.
func cli(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "waits" {
		return waits(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "wrk-requests" {
		return wrkRequests(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "check-port" {
		return checkPort(args[1:], stderr)
	}
	sub := "run"
	if len(args) > 0 && (args[0] == "run" || args[0] == "gateway-config") {
		sub, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("seckill-bench "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	cfg.register(fs)
	fs.Usage = func() {
		_, _ = fmt.Fprint(stderr, `usage:
  seckill-bench [run] [flags]          run the pressure test (start the gateway with -gateway-bin or -build, or give -target)
  seckill-bench gateway-config [flags] print the Caddyfile the bench needs, for a gateway you start yourself
  seckill-bench waits TRACE...         where the gateway's goroutines waited, from a trace saved by -pprof DIR -trace
  seckill-bench wrk-requests [flags]   the buys wrk sends (scripts/bench-wrk.sh): users' paths, tokens, addresses, keys
  seckill-bench check-port [-pid PID] IP:PORT...
                                       fail when something answers on a port already (with -pid: when another process shares it)

flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		_, _ = fmt.Fprintf(stderr, "seckill-bench: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if sub == "gateway-config" {
		return gatewayConfig(cfg, stdout, stderr)
	}
	return run(ctx, cfg, stdout, stderr)
}

// gatewayConfig prints the configuration for a gateway the user starts, with the secrets to pass
// to the bench (-target, -admin, -jwt-secret) in a comment.
func gatewayConfig(cfg config, stdout, stderr io.Writer) int {
	if cfg.jwtSecret == "" {
		cfg.jwtSecret = randomSecret()
	}
	if len(cfg.jwtSecret) < 32 {
		_, _ = fmt.Fprintln(stderr, "seckill-bench: -jwt-secret must be at least 32 bytes for HS256")
		return exitUsage
	}
	if cfg.activities < 1 || cfg.stock < 1 || cfg.limit < 1 {
		_, _ = fmt.Fprintln(stderr, "seckill-bench: -activities, -stock and -limit must be at least 1")
		return exitUsage
	}
	spec := gatewaySpec{
		Listen: cfg.listen, Admin: cfg.adminListen, RedisAddr: cfg.redisAddr, AutoPipeline: cfg.autoPipeline, AdmitBatch: cfg.admitBatch,
		RedisCluster: cfg.redisCluster,
		JWTSecret:    cfg.jwtSecret, URLSecret: randomSecret(),
		IPRate: cfg.ipRate, UserRate: cfg.userRate,
		Prefix: cfg.prefix, BaselinePath: cfg.baselinePath,
		Activities: activities(&cfg, time.Now()),
	}
	if cfg.store == "redis" && cfg.redisAddr == "" {
		_, _ = fmt.Fprintln(stderr, "seckill-bench: gateway-config -store redis needs -redis-addr")
		return exitUsage
	}
	if err := errors.Join(cfg.validateBuckets(), cfg.validateCluster()); err != nil {
		_, _ = fmt.Fprintln(stderr, "seckill-bench: gateway-config", err)
		return exitUsage
	}
	if cfg.store == "local" {
		spec.LocalDir, spec.LocalFsync = "seckill-data", cfg.localFsync
	}
	if cfg.orders == "embedded" {
		spec.OrdersDB = "orders.db"
	}
	run := fmt.Sprintf("seckill-bench -target http://%s -admin http://%s -jwt-secret %s -scenario %s -users %d -activities %d -stock %d -limit %d -orders %s",
		cfg.listen, cfg.adminListen, cfg.jwtSecret, cfg.scenario, cfg.users, cfg.activities, cfg.stock, cfg.limit, cfg.orders)
	switch cfg.store {
	case "redis":
		run += " -store redis -redis-addr " + cfg.redisAddr
	case "local":
		run += " -store local"
	}
	if cfg.orders == "standalone" {
		// The bench reconciles the order database your order backend writes: it cannot guess it.
		run += " -reconcile-db DSN"
	}
	_, _ = fmt.Fprintf(stdout, "# Run the bench against it with:\n#   %s\n", run)
	if cfg.orders == "standalone" {
		_, _ = fmt.Fprintln(stdout, "# where DSN is your order backend's database (postgres://... or sqlite:PATH); start the\n# order backend (cmd/orderbackend run) on the same Redis and the same JWT secret.")
	}
	if cfg.scenario == "burst" {
		_, _ = fmt.Fprintln(stdout, "# The activities start in 24 hours with the path revealed now: the bench waits for the start,\n# so move it (admin API PUT /seckill/activities/{id}) or give -scenario closed/open.")
	}
	_, _ = fmt.Fprint(stdout, spec.caddyfile())
	return exitOK
}
