package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/caddy-seckill/caddy-seckill/internal/proc"
)

// environment is the gateway under test and what it needs, started by the bench or given.
type environment struct {
	dir       string
	removeDir bool

	started bool // the bench started the gateway (and may reschedule its activities)
	gateway *child
	redis   *child
	orders  *child

	base      string // the gateway's base URL
	admin     string // its admin endpoint, "" when unknown
	ordersOps string // the standalone order backend's metrics and pprof base URL, "" when not started here
	redisAddr string
	ordersDB  string // "sqlite:PATH" or postgres://, for an in-process reconcile
	embedded  bool   // the order backend runs in the gateway: reconcile through its admin API
	spec      gatewaySpec
}

// activities returns the bench's activity definitions. Closed and open loops buy in activities
// that are already open; a burst needs them upcoming, with the path revealed, so that every user
// can hold its path before the start (the bench moves the start to the burst instant later).
func activities(cfg *config, now time.Time) []activitySpec {
	start, end, reveal := now.Add(-time.Minute), now.Add(24*time.Hour), time.Duration(0)
	if cfg.scenario == "burst" {
		start, end, reveal = now.Add(24*time.Hour), now.Add(72*time.Hour), 48*time.Hour
	}
	var out []activitySpec
	for _, id := range cfg.activityIDs() {
		out = append(out, activitySpec{ID: id, Stock: cfg.stock, Limit: cfg.limit, Buckets: cfg.buckets, Start: start, End: end, Reveal: reveal})
	}
	return out
}

func randomSecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// setup prepares the run: the work directory, the binaries (-build), redis-server, the gateway
// and the order backend, each on free loopback ports.
func setup(ctx context.Context, cfg *config, log io.Writer) (_ *environment, err error) {
	e := &environment{dir: cfg.workDir}
	if e.dir == "" {
		if e.dir, err = os.MkdirTemp("", "seckill-bench-"); err != nil {
			return nil, fmt.Errorf("work directory: %w", err)
		}
		e.removeDir = !cfg.keep
	} else if err := os.MkdirAll(e.dir, 0o755); err != nil {
		return nil, fmt.Errorf("work directory: %w", err)
	}
	defer func() {
		if err != nil {
			_ = e.close(false)
			err = fmt.Errorf("%w\nwork directory (config, logs), kept: %s", err, e.dir)
		}
	}()
	if cfg.jwtSecret == "" {
		cfg.jwtSecret = randomSecret()
	}
	if cfg.build {
		if err := buildBinaries(ctx, cfg, e.dir, log); err != nil {
			return nil, err
		}
	}
	if cfg.target != "" {
		e.base, e.admin = strings.TrimRight(cfg.target, "/"), strings.TrimRight(cfg.admin, "/")
		e.redisAddr = cfg.redisAddr
		e.ordersDB = cfg.reconcileDB
		e.embedded = cfg.orders == "embedded"
		if err := checkTarget(e.base, cfg.gatewayPID); err != nil {
			return nil, err
		}
		return e, nil
	}

	if cfg.store == "redis" {
		e.redisAddr = cfg.redisAddr
		if e.redisAddr == "" {
			if e.redisAddr, err = proc.FreeAddr(); err != nil {
				return nil, err
			}
			_, port, _ := strings.Cut(e.redisAddr, ":")
			e.redis, err = startChild("redis-server", e.dir, cfg.redisBin, []string{
				"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", e.dir,
			}, nil)
			if err != nil {
				return nil, err
			}
			if err := e.redis.waitTCP(ctx, e.redisAddr, 10*time.Second); err != nil {
				return nil, err
			}
		}
	}

	listen, err := proc.FreeAddr()
	if err != nil {
		return nil, err
	}
	adminAddr, err := proc.FreeAddr()
	if err != nil {
		return nil, err
	}
	e.base, e.admin, e.started = "http://"+listen, "http://"+adminAddr, true
	e.spec = gatewaySpec{
		Listen: listen, Admin: adminAddr, RedisAddr: e.redisAddr, AutoPipeline: cfg.autoPipeline, AdmitBatch: cfg.admitBatch,
		RedisCluster: cfg.redisCluster,
		JWTSecret:    cfg.jwtSecret, URLSecret: randomSecret(),
		IPRate: cfg.ipRate, UserRate: cfg.userRate,
		Prefix: cfg.prefix, BaselinePath: cfg.baselinePath,
		Activities: activities(cfg, time.Now()),
	}
	if cfg.store == "local" {
		e.spec.LocalDir, e.spec.LocalFsync = filepath.Join(e.dir, "seckill-data"), cfg.localFsync
	}
	if cfg.orders == "embedded" {
		e.spec.OrdersDB, e.embedded = filepath.Join(e.dir, "orders.db"), true
	}
	conf := filepath.Join(e.dir, "Caddyfile")
	if err := os.WriteFile(conf, []byte(e.spec.caddyfile()), 0o600); err != nil {
		return nil, fmt.Errorf("write gateway config: %w", err)
	}
	// Caddy listens with SO_REUSEPORT: on a port something already holds it would start and share
	// the connections with it, so the port is checked before the start and after.
	for _, addr := range []string{listen, adminAddr} {
		if err := proc.PortFree(addr); err != nil {
			return nil, fmt.Errorf("start the gateway: %w", err)
		}
	}
	e.gateway, err = startChild("gateway", e.dir, cfg.gatewayBin, []string{"run", "--config", conf, "--adapter", "caddyfile"}, cfg.gatewayEnv)
	if err != nil {
		return nil, err
	}
	// Every activity, not only the first: Caddy starts its apps in no fixed order, so the server may
	// answer while the seckill app is still defining the activities one by one (a 404 for the
	// others meanwhile).
	for _, a := range e.spec.Activities {
		if err := e.gateway.waitHTTP(ctx, e.base+cfg.prefix+"/"+a.ID, 200, 30*time.Second); err != nil {
			return nil, err
		}
	}
	for _, addr := range []string{listen, adminAddr} {
		if err := proc.SoleListener(addr, e.gateway.pid()); err != nil {
			return nil, fmt.Errorf("gateway (log %s): %w", e.gateway.log, err)
		}
	}

	if cfg.orders == "standalone" {
		ordersAddr, err := proc.FreeAddr()
		if err != nil {
			return nil, err
		}
		// Its metrics and pprof listener, for -pprof: the order backend's CPU profiles.
		opsAddr, err := proc.FreeAddr()
		if err != nil {
			return nil, err
		}
		db := filepath.Join(e.dir, "orders.db")
		e.ordersDB = "sqlite:" + db
		e.orders, err = startChild("orderbackend", e.dir, cfg.ordersBin, []string{
			"run", "-redis", e.redisAddr, "-db", e.ordersDB, "-listen", ordersAddr, "-metrics-listen", opsAddr, "-name", "seckill-bench",
		}, []string{"SECKILL_JWT_SECRET=" + cfg.jwtSecret})
		if err != nil {
			return nil, err
		}
		for _, addr := range []string{ordersAddr, opsAddr} {
			if err := e.orders.waitTCP(ctx, addr, 30*time.Second); err != nil {
				return nil, err
			}
		}
		e.ordersOps = "http://" + opsAddr
	}
	return e, nil
}

// buildBinaries builds the gateway (and the standalone order backend) from this module.
func buildBinaries(ctx context.Context, cfg *config, dir string, log io.Writer) error {
	gobin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("-build needs the go command: %w", err)
	}
	build := func(pkg, out string) error {
		_, _ = fmt.Fprintf(log, "building %s\n", pkg)
		cmd := exec.CommandContext(ctx, gobin, "build", "-o", out, pkg)
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("build %s (run the bench from inside the caddy-seckill module): %w", pkg, err)
		}
		return nil
	}
	if cfg.gatewayBin == "" {
		cfg.gatewayBin = filepath.Join(dir, "caddy")
		if err := build("github.com/caddy-seckill/caddy-seckill/cmd/caddy", cfg.gatewayBin); err != nil {
			return err
		}
	}
	if cfg.orders == "standalone" && cfg.ordersBin == "" {
		cfg.ordersBin = filepath.Join(dir, "orderbackend")
		if err := build("github.com/caddy-seckill/caddy-seckill/cmd/orderbackend", cfg.ordersBin); err != nil {
			return err
		}
	}
	return nil
}

// watch returns the processes to watch.
func (e *environment) watch(cfg *config) *procWatch {
	w := &procWatch{gateway: cfg.gatewayPID}
	if e.gateway != nil {
		w.gateway = e.gateway.pid()
	}
	for _, c := range []*child{e.redis, e.orders} {
		if c != nil {
			w.helpers = append(w.helpers, namedPID{c.name, c.pid()})
		}
	}
	return w
}

// close stops every child, the order backend first (it writes to the store), and removes the
// work directory unless it is to be kept (always kept after a failure, for the logs).
func (e *environment) close(ok bool) error {
	var errs []error
	for _, c := range []*child{e.orders, e.gateway, e.redis} {
		if c != nil {
			if err := c.stop(10 * time.Second); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if e.removeDir && ok && len(errs) == 0 {
		if err := os.RemoveAll(e.dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
