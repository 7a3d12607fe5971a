package caddymodule_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestRedisForgottenSale: a gateway with orders that starts on a Redis that lost the sale (a
// restart without persistence, FLUSHALL, another server or key prefix) refuses to start instead
// of defining the activity afresh, with its full stock, over the orders of the items it sold.
// It refuses before defining anything: the other gateways of the sale would sell a definition
// written into the shared Redis.
func TestRedisForgottenSale(t *testing.T) {
	rd := testsrv.StartRedis(t)
	db := filepath.Join(t.TempDir(), "orders.db")
	port := freePort(t)
	t.Cleanup(func() { _ = caddy.Stop() })
	cfg := "store redis " + rd.Addr + "\nurl_secret u\n" + jwtBlock + "captcha off\n" + ordersOption("sqlite "+db) +
		saleBlock("lost", 2)
	if err := loadCaddy(t, port, cfg, ordersSite); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, fmt.Sprintf("http://127.0.0.1:%d", port))
	alice := token(t, "alice")
	expect(t, "alice buys", c.Post(buyPath(t, c, "lost", alice), alice, ""), http.StatusAccepted, "queued")
	waitResult(t, c, "lost", alice, "pending_payment")
	stopCaddy(t)

	rc := redis.NewClient(&redis.Options{Addr: rd.Addr})
	defer rc.Close()
	ctx := context.Background()
	if err := rc.FlushAll(ctx).Err(); err != nil { // this test's private server
		t.Fatal(err)
	}
	err := loadCaddy(t, port, cfg, ordersSite)
	if err == nil || !strings.Contains(err.Error(), "holds orders of a sale this store does not know") ||
		!strings.Contains(err.Error(), "activity lost") || !strings.Contains(err.Error(), "Redis") {
		t.Fatalf("start on a Redis that lost the sale: %v; want a refusal", err)
	}
	if n, err := rc.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("the refused start left %d keys in Redis (%v); want nothing defined", n, err)
	}
}
