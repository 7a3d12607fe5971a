package caddymodule_test

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestReload checks that a reload never resets a sale: the memory store survives it, an unchanged
// definition is a no-op, a changed running activity fails the reload with a clear message while
// the old configuration keeps serving, and an activity that has not started may be changed.
func TestReload(t *testing.T) {
	port, err := testsrv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = caddy.Stop() })
	now := time.Now()
	start, end := now.Add(-time.Minute), now.Add(time.Hour)
	config := func(runningStock, upcomingStock int) string {
		return jwtBlock + "captcha off\n" +
			activityBlock("run", runningStock, 1, start, end, 0) +
			activityBlock("soon", upcomingStock, 1, now.Add(time.Hour), now.Add(2*time.Hour), 0)
	}
	if err := loadCaddy(t, port, config(5, 5), route); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, fmt.Sprintf("http://127.0.0.1:%d", port))
	alice := token(t, "alice")
	path := buyPath(t, c, "run", alice)
	expect(t, "buy", c.Post(path, alice, ""), http.StatusAccepted, "queued")

	if err := loadCaddy(t, port, config(5, 5), route); err != nil {
		t.Fatalf("reload unchanged: %v", err)
	}
	c.AfterReload()
	if n := remaining(t, "run"); n != 4 {
		t.Errorf("remaining %d after an unchanged reload, want 4", n)
	}
	// The path handed out before the reload still works (same salt, same generated secret).
	expect(t, "retry after reload", c.Post(path, alice, ""), http.StatusConflict, "limit_reached")

	err = loadCaddy(t, port, config(50, 5), route)
	if err == nil || !strings.Contains(err.Error(), "activity run is running") || !strings.Contains(err.Error(), "admin API") {
		t.Fatalf("reload changing a running activity: %v", err)
	}
	if n := remaining(t, "run"); n != 4 {
		t.Errorf("remaining %d after a refused reload, want 4", n)
	}
	expect(t, "old config still serves", c.Get("/seckill/run", ""), http.StatusOK, "ok")

	if err := loadCaddy(t, port, config(5, 7), route); err != nil {
		t.Fatalf("reload changing an upcoming activity: %v", err)
	}
	if n := remaining(t, "soon"); n != 7 {
		t.Errorf("upcoming activity: remaining %d after the reload, want 7", n)
	}
	if n := remaining(t, "run"); n != 4 {
		t.Errorf("remaining %d, want 4", n)
	}
}

// TestProvisionErrors checks the configurations that adapt but cannot run.
func TestProvisionErrors(t *testing.T) {
	now := time.Now()
	act := activityBlock("a", 1, 1, now.Add(-time.Minute), now.Add(time.Hour), 0)
	for _, tc := range []struct {
		name, seckill, site, want string
	}{
		{"no jwt", "captcha off\n" + act, route, "the seckill app has no jwt configuration"},
		{"forward without secret", jwtBlock + act, "route /seckill/* {\n\tseckill {\n\t\tforward\n\t}\n}\n", "forward needs the seckill app's forward_secret"},
		{"distributed with memory", jwtBlock + "rate_limit user 2/s distributed\n", route, "distributed needs store redis"},
		{"buckets with memory", jwtBlock + bucketsBlock("b", 8, 8), route, "activity b: buckets 8 needs store redis"},
		{"buckets with local", jwtBlock + "url_secret u\nstore local " + filepath.Join(t.TempDir(), "d") + "\n" + bucketsBlock("b", 8, 2), route,
			"activity b: buckets 2 needs store redis (it spreads the stock over Redis shards); store local "},
		{"empty env secret", jwtBlock + "url_secret {env.SECKILL_TEST_UNSET_VARIABLE}\n", route, "url_secret \"{env.SECKILL_TEST_UNSET_VARIABLE}\" is empty"},
		{"missing key file", "jwt {\n\talgorithms RS256\n\tpublic_key_file /nonexistent/key.pem\n}\n", route, "jwt: public_key_file: open /nonexistent/key.pem"},
		{"jwks unreachable", "jwt {\n\talgorithms RS256\n\tjwks_url http://127.0.0.1:1/jwks\n}\n", route, "jwt: jwks http://127.0.0.1:1/jwks: Get"},
		{"hmac secret unset", "jwt {\n\talgorithms HS256\n\thmac_secret {env.SECKILL_TEST_UNSET_VARIABLE}\n}\n", route, `jwt: hmac_secret "{env.SECKILL_TEST_UNSET_VARIABLE}" is empty`},
		{"redis unreachable", jwtBlock + "url_secret u\nstore redis 127.0.0.1:1\n", route, "connect to redis"},
		{"orders handler without orders", jwtBlock + act, "route /orders/* {\n\tseckill_orders\n}\n", "seckill_orders serves the embedded order backend, and the seckill app has none"},
		{"orders handler without jwt", "orders sqlite " + filepath.Join(t.TempDir(), "o.db") + "\n", "route /orders/* {\n\tseckill_orders\n}\n", "the seckill app has no jwt configuration"},
		{"orders dsn unset", jwtBlock + "orders postgres {env.SECKILL_TEST_UNSET_VARIABLE}\n", route, `orders postgres: "{env.SECKILL_TEST_UNSET_VARIABLE}" is empty once placeholders are replaced`},
		{"orders postgres unreachable", jwtBlock + "orders postgres postgres://u@127.0.0.1:1/shop?connect_timeout=2\n", route, "orders postgres: open the order database"},
		{"orders sqlite no directory", jwtBlock + "orders sqlite /nonexistent/dir/o.db\n", route, "orders sqlite /nonexistent/dir/o.db: open the order database"},
		{"demo without jwt", "captcha off\n", "route /demo {\n\tseckill_demo_signin\n}\n", "seckill_demo_signin mints HMAC tokens"},
		{"demo without hmac", "jwt {\n\talgorithms ES256\n\tpublic_key_file " + ecKeyFile(t) + "\n}\n", "route /demo {\n\tseckill_demo_signin\n}\n", "needs an hmac_secret and an HS256, HS384 or HS512 algorithm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port, err := testsrv.FreePort()
			if err != nil {
				t.Fatal(err)
			}
			err = loadCaddy(t, port, tc.seckill, tc.site)
			if err == nil {
				_ = caddy.Stop()
				t.Fatalf("load succeeded; want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "jwt: jwt:") {
				t.Errorf("error %q says jwt twice", err)
			}
		})
	}
}
