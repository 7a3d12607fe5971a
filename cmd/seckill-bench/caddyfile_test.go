package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/caddy-seckill/caddy-seckill" // the app, its handlers and the store modules
)

// adapt runs the real Caddyfile adapter, with the seckill plugin's parser, over a generated config.
func adapt(t *testing.T, caddyfile string) map[string]any {
	t.Helper()
	out, warns, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), map[string]any{"filename": "bench"})
	if err != nil {
		t.Fatalf("the generated config does not adapt: %v\n%s", err, caddyfile)
	}
	for _, w := range warns {
		t.Errorf("adapter warning: %s line %d: %s", w.File, w.Line, w.Message)
	}
	var cfg map[string]any
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func get(m any, path ...string) any {
	for _, k := range path {
		mm, ok := m.(map[string]any)
		if !ok {
			return nil
		}
		m = mm[k]
	}
	return m
}

func TestGatewayConfigAdapts(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name      string
		scenario  string
		redisAddr string
		ordersDB  string
		pipeline  bool
		batch     int
	}{
		{"memory, open sale", "closed", "", "", false, 0},
		{"memory, embedded orders", "open", "", "/tmp/bench/orders.db", false, 0},
		{"redis, burst", "burst", "127.0.0.1:6390", "", false, 0},
		{"redis, auto-pipelined", "closed", "127.0.0.1:6390", "", true, 0},
		{"redis, single admission, auto-pipelined", "closed", "127.0.0.1:6390", "", true, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := config{scenario: c.scenario, activities: 3, stock: 70, limit: 2, actPrefix: "b-"}
			spec := gatewaySpec{
				Listen: "127.0.0.1:18080", Admin: "127.0.0.1:12019", RedisAddr: c.redisAddr, AutoPipeline: c.pipeline, AdmitBatch: c.batch,
				JWTSecret: strings.Repeat("j", 40), URLSecret: strings.Repeat("u", 40),
				IPRate: "20/s burst 40", UserRate: "10/s burst 5",
				Prefix: "/seckill", BaselinePath: "/baseline", OrdersDB: c.ordersDB,
				Activities: activities(&cfg, now),
			}
			text := spec.caddyfile()
			got := adapt(t, text)

			app := get(got, "apps", "seckill")
			if app == nil {
				t.Fatalf("no seckill app in %v", got)
			}
			if get(app, "disable_captcha") != true {
				t.Errorf("captcha is not off: %v", app)
			}
			acts, _ := get(app, "activities").(map[string]any)
			if len(acts) != 3 {
				t.Fatalf("activities %v, want b-0..b-2", acts)
			}
			for _, id := range []string{"b-0", "b-1", "b-2"} {
				if get(acts, id, "stock") != float64(70) || get(acts, id, "limit") != float64(2) {
					t.Errorf("activity %s: %v", id, acts[id])
				}
				start, _ := time.Parse(time.RFC3339, get(acts, id, "start").(string))
				if c.scenario == "burst" {
					if !start.After(now) || get(acts, id, "reveal") == nil {
						t.Errorf("burst activity %s must be upcoming with its path revealed: %v", id, acts[id])
					}
				} else if !start.Before(now) {
					t.Errorf("activity %s must be open: %v", id, acts[id])
				}
			}
			if c.redisAddr != "" && !strings.Contains(text, "store redis "+c.redisAddr) {
				t.Errorf("redis store missing:\n%s", text)
			}
			if ap := get(app, "store", "auto_pipeline"); (ap == true) != c.pipeline {
				t.Errorf("store auto_pipeline = %v, want %v:\n%s", ap, c.pipeline, text)
			}
			if ab, _ := get(app, "store", "admit_batch").(float64); int(ab) != c.batch {
				t.Errorf("store admit_batch = %v, want %d:\n%s", ab, c.batch, text)
			}
			js, _ := json.Marshal(got)
			if c.ordersDB != "" {
				if get(app, "orders", "type") != "sqlite" || get(app, "orders", "dsn") != c.ordersDB {
					t.Errorf("embedded orders: %v", get(app, "orders"))
				}
				if !bytes.Contains(js, []byte(`"handler":"seckill_orders"`)) {
					t.Errorf("no seckill_orders route:\n%s", js)
				}
			} else if get(app, "orders") != nil || bytes.Contains(js, []byte("seckill_orders")) {
				t.Errorf("orders configured without being asked for:\n%s", js)
			}
			for _, want := range []string{`"trusted_proxies"`, `"127.0.0.1/32"`, `"handler":"seckill"`, `"handler":"static_response"`, "respond baseline", `"/baseline/*"`, `"listen":"127.0.0.1:12019"`, `"listen":["127.0.0.1:18080"]`} {
				if !bytes.Contains(js, []byte(want)) {
					t.Errorf("adapted config lacks %s:\n%s", want, js)
				}
			}
		})
	}
}

func TestGatewayConfigCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	code := cli(context.Background(), []string{"gateway-config", "-activities", "2", "-stock", "5", "-listen", "127.0.0.1:18081",
		"-jwt-secret", strings.Repeat("s", 32)}, &out, &errOut)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "-jwt-secret "+strings.Repeat("s", 32)) {
		t.Errorf("the printed config does not tell how to run the bench against it:\n%s", out.String())
	}
	cfg := adapt(t, out.String())
	if acts, _ := get(cfg, "apps", "seckill", "activities").(map[string]any); len(acts) != 2 {
		t.Errorf("activities %v", acts)
	}

	if code := cli(context.Background(), []string{"gateway-config", "-jwt-secret", "short"}, &out, &errOut); code != exitUsage {
		t.Errorf("a short secret: exit %d, want %d", code, exitUsage)
	}

	// With Redis and the standalone order backend, the printed command must be one the bench
	// accepts for that gateway: its store, and the order database to reconcile.
	out.Reset()
	code = cli(context.Background(), []string{"gateway-config", "-store", "redis", "-redis-addr", "10.0.0.9:6379",
		"-orders", "standalone", "-jwt-secret", strings.Repeat("s", 32)}, &out, &errOut)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"-orders standalone", "-store redis -redis-addr 10.0.0.9:6379", "-reconcile-db DSN"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the printed command lacks %q:\n%s", want, out.String())
		}
	}
}

// TestGatewayConfigBuckets: -buckets splits every activity's stock in the generated config (the
// real adapter reads it), -redis-cluster names the nodes with cluster, and gateway-config refuses
// -buckets without store redis.
func TestGatewayConfigBuckets(t *testing.T) {
	cfg := config{scenario: "closed", activities: 2, stock: 1000, limit: 1, buckets: 8, actPrefix: "b-"}
	spec := gatewaySpec{Listen: "127.0.0.1:18080", Admin: "127.0.0.1:12019", RedisAddr: "127.0.0.1:6390",
		JWTSecret: strings.Repeat("j", 40), URLSecret: strings.Repeat("u", 40), Prefix: "/seckill", BaselinePath: "/baseline",
		Activities: activities(&cfg, time.Now())}
	app := get(adapt(t, spec.caddyfile()), "apps", "seckill")
	for _, id := range []string{"b-0", "b-1"} {
		if got := get(app, "activities", id, "buckets"); got != float64(8) {
			t.Errorf("activity %s: buckets %v, want 8", id, got)
		}
	}
	var out, errOut bytes.Buffer
	if code := cli(context.Background(), []string{"gateway-config", "-store", "redis", "-redis-addr", "10.0.0.9:6379", "-buckets", "8",
		"-jwt-secret", strings.Repeat("s", 32)}, &out, &errOut); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "buckets 8") {
		t.Errorf("gateway-config -buckets 8:\n%s", out.String())
	}
	// On a cluster: every node an address of store redis, with cluster.
	spec.RedisAddr, spec.RedisCluster = "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003", true
	store := get(adapt(t, spec.caddyfile()), "apps", "seckill", "store")
	if addrs, _ := get(store, "addresses").([]any); len(addrs) != 3 || get(store, "cluster") != true {
		t.Errorf("store on a cluster: %v", store)
	}
	if code := cli(context.Background(), []string{"gateway-config", "-buckets", "8", "-jwt-secret", strings.Repeat("s", 32)}, &out, &errOut); code != exitUsage {
		t.Errorf("gateway-config -buckets with store memory: exit %d, want %d", code, exitUsage)
	}
}

// TestGatewayConfigLocal: -store local writes store local with its fsync, and the printed command
// names the store.
func TestGatewayConfigLocal(t *testing.T) {
	spec := gatewaySpec{Listen: "127.0.0.1:18080", Admin: "127.0.0.1:12019", LocalDir: "/tmp/bench/seckill-data", LocalFsync: "always",
		JWTSecret: strings.Repeat("j", 40), URLSecret: strings.Repeat("u", 40), Prefix: "/seckill", BaselinePath: "/baseline",
		Activities: activities(&config{scenario: "closed", activities: 1, stock: 5, limit: 1, actPrefix: "b-"}, time.Now())}
	app := get(adapt(t, spec.caddyfile()), "apps", "seckill")
	if get(app, "store", "type") != "local" || get(app, "store", "dir") != "/tmp/bench/seckill-data" || get(app, "store", "fsync") != "always" {
		t.Errorf("store: %v", get(app, "store"))
	}
	var out, errOut bytes.Buffer
	if code := cli(context.Background(), []string{"gateway-config", "-store", "local", "-jwt-secret", strings.Repeat("s", 32)}, &out, &errOut); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "store local seckill-data") || !strings.Contains(out.String(), "-store local") {
		t.Errorf("gateway-config -store local:\n%s", out.String())
	}
}

func TestRunFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{},                                // neither a gateway to start nor one to use
		{"-target", "http://127.0.0.1:1"}, // no secret for the tokens
		{"-gateway-bin", "x", "-scenario", "bogus"},
		{"-gateway-bin", "x", "-store", "memory", "-orders", "standalone"},
		{"-gateway-bin", "x", "-store", "redis", "-orders", "standalone"}, // no binary and no -build
		{"-gateway-bin", "x", "-orders", "bogus"},
		{"-gateway-bin", "x", "-users", "0"},
		{"-gateway-bin", "x", "-redis-admit-batch", "1"}, // store memory: the option would be ignored
		{"-gateway-bin", "x", "-redis-autopipeline"},
		{"-gateway-bin", "x", "-buckets", "8"},                                   // store memory: buckets need redis
		{"-gateway-bin", "x", "-store", "redis", "-buckets", "1"},                // 2 to 256
		{"-gateway-bin", "x", "-store", "redis", "-buckets", "257"},              // 2 to 256
		{"-gateway-bin", "x", "-store", "redis", "-stock", "4", "-buckets", "8"}, // a bucket without an item
		{"-target", "http://127.0.0.1:1", "-jwt-secret", "0123456789abcdef0123456789abcdef", "-store", "redis", "-buckets", "8"},
		{"-gateway-bin", "x", "-store", "redis", "-redis-cluster"},                                         // no nodes named
		{"-gateway-bin", "x", "-redis-cluster", "-redis-addr", "127.0.0.1:1"},                              // store memory
		{"-build", "-store", "redis", "-redis-cluster", "-redis-addr", "a:1,b:2", "-orders", "standalone"}, // one address only
		{"-gateway-bin", "x", "-store", "redis", "-redis-admit-batch", "2000"},
		{"-gateway-bin", "x", "-store", "disk"},
		{"-gateway-bin", "x", "-local-fsync", "always"},                      // store memory: the option would be ignored
		{"-gateway-bin", "x", "-store", "local", "-local-fsync", "everysec"}, // not a policy
		{"-target", "http://127.0.0.1:1", "-jwt-secret", "0123456789abcdef0123456789abcdef", "-store", "local", "-local-fsync", "always"},
		{"-gateway-bin", "x", "-gateway-env", "GOGC"}, // not NAME=VALUE
		{"-gateway-bin", "x", "-trace"},               // no -pprof directory to save it in
		{"-target", "http://127.0.0.1:1", "-jwt-secret", "0123456789abcdef0123456789abcdef", "-store", "redis", "-redis-addr", "127.0.0.1:1", "-orders", "standalone"}, // nothing to reconcile the orders against
		{"-target", "http://127.0.0.1:1", "-jwt-secret", "0123456789abcdef0123456789abcdef", "-gateway-env", "GOGC=50"},
		{"-target", "http://127.0.0.1:1", "-jwt-secret", "0123456789abcdef0123456789abcdef", "-store", "redis", "-redis-admit-batch", "1"},
		{"extra-argument"},
	} {
		var out, errOut bytes.Buffer
		if code := cli(context.Background(), args, &out, &errOut); code != exitUsage {
			t.Errorf("%q: exit %d, want %d (%s)", args, code, exitUsage, errOut.String())
		}
	}
}
