package caddymodule_test

import (
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// TestRefusedReloadKeepsPrice checks that a reload refused because it changes a running activity
// leaves the running order backend as it was: the orders created after it are priced as the
// configuration in force (and the status page) says, not as the refused one.
func TestRefusedReloadKeepsPrice(t *testing.T) {
	port := freePort(t)
	t.Cleanup(func() { _ = caddy.Stop() })
	db := filepath.Join(t.TempDir(), "orders.db")
	now := time.Now()
	config := func(stock int, price string) string {
		return jwtBlock + "captcha off\n" + ordersOption("sqlite "+db) +
			fmt.Sprintf("activity run {\n\tstock %d\n\tlimit 1\n\tstart %s\n\tend %s\n\tpay_within 1m\n\tprice %s\n}\n",
				stock, rfc3339(now.Add(-time.Minute)), rfc3339(now.Add(time.Hour)), price)
	}
	if err := loadCaddy(t, port, config(3, "10.00 USD"), ordersSite); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, fmt.Sprintf("http://127.0.0.1:%d", port))
	err := loadCaddy(t, port, config(4, "1.00 USD"), ordersSite)
	if err == nil || !strings.Contains(err.Error(), "activity run is running") {
		t.Fatalf("reload changing a running activity: %v", err)
	}
	c.AfterReload()
	if r := c.Get("/seckill/run", ""); r.Status != http.StatusOK || !strings.Contains(string(r.Raw), `"amount":1000`) {
		t.Fatalf("status after the refused reload: %s", r)
	}
	alice := token(t, "alice")
	expect(t, "alice buys", c.Post(buyPath(t, c, "run", alice), alice, ""), http.StatusAccepted, "queued")
	order := waitResult(t, c, "run", alice, "pending_payment").Str("order_id")
	r := c.Get("/orders/"+order, alice)
	if r.Status != http.StatusOK || r.Num("amount") != 1000 {
		t.Fatalf("order after a refused reload: %s; want amount 1000 (10.00 USD, the price in force)", r)
	}
}

// TestRefusedReloadDefinesNothing checks that a reload refused because it changes a running
// activity changes no other activity either: the configuration in force stays in force, in the
// store too. The activities are defined in map order, so the reload is tried several times.
func TestRefusedReloadDefinesNothing(t *testing.T) {
	port := freePort(t)
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
	for i := range 12 {
		err := loadCaddy(t, port, config(50, 7), route)
		if err == nil || !strings.Contains(err.Error(), "activity run is running") {
			t.Fatalf("reload %d changing a running activity: %v", i, err)
		}
		if n := remaining(t, "soon"); n != 5 {
			t.Fatalf("refused reload %d: the upcoming activity's stock is %d in the store, want 5 (the configuration in force)", i, n)
		}
	}
}

// TestRolledBackReloadKeepsPrice checks that a reload Caddy rolls back after the seckill app
// started (another app failed: a site on a busy port) leaves the running order backend with the
// configuration in force's prices, as a refused one does. Apps start in map order, so the
// reload is tried several times.
func TestRolledBackReloadKeepsPrice(t *testing.T) {
	port := freePort(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0") // no SO_REUSEPORT: Caddy cannot bind it
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	t.Cleanup(func() { _ = caddy.Stop() })
	db := filepath.Join(t.TempDir(), "orders.db")
	now := time.Now()
	config := func(price string) string {
		return jwtBlock + "captcha off\n" + ordersOption("sqlite "+db) +
			fmt.Sprintf("activity run {\n\tstock 3\n\tlimit 1\n\tstart %s\n\tend %s\n\tpay_within 1m\n\tprice %s\n}\n",
				rfc3339(now.Add(-time.Minute)), rfc3339(now.Add(time.Hour)), price)
	}
	if err := loadCaddy(t, port, config("10.00 USD"), ordersSite); err != nil {
		t.Fatal(err)
	}
	failing := caddyfile(t, port, config("1.00 USD"), ordersSite) +
		fmt.Sprintf("\nhttp://%s {\n\trespond ok\n}\n", busy.Addr())
	for i := range 12 {
		if err := loadCaddyfile(t, failing); err == nil || !strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("reload %d with a site on a busy port: %v", i, err)
		}
	}
	c := newClient(t, fmt.Sprintf("http://127.0.0.1:%d", port))
	c.AfterReload()
	alice := token(t, "alice")
	expect(t, "alice buys", c.Post(buyPath(t, c, "run", alice), alice, ""), http.StatusAccepted, "queued")
	order := waitResult(t, c, "run", alice, "pending_payment").Str("order_id")
	if r := c.Get("/orders/"+order, alice); r.Status != http.StatusOK || r.Num("amount") != 1000 {
		t.Fatalf("order after rolled-back reloads: %s; want amount 1000 (10.00 USD, the price in force)", r)
	}
}
