package caddymodule_test

import (
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestOrdersReload checks that a reload keeps the embedded order backend running (same workers,
// same database, no work lost) unless its configuration changed, that /metrics reads the backend
// that runs (each configuration registers its collectors anew), and that start_in never moves a
// start, before or after the sale opened.
func TestOrdersReload(t *testing.T) {
	port, err := testsrv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = caddy.Stop() })
	db := filepath.Join(t.TempDir(), "orders.db")
	open := saleBlock("r", 3) // fixed times: the same definition at every load
	config := func(sweep string) string {
		return jwtBlock + "captcha off\n" +
			"orders sqlite " + db + " {\n\tsweep_every " + sweep + "\n}\n" + open +
			"activity quick {\n\tstock 1\n\tstart_in 1s\n\tend 2036-01-01T00:00:00Z\n}\n" +
			"activity soon {\n\tstock 5\n\tstart_in 1h\n\tend 2036-01-01T00:00:00Z\n}\n"
	}
	var c *client
	load := func(what, sweep string) {
		t.Helper()
		if err := loadCaddy(t, port, config(sweep), ordersSite); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if c == nil {
			c = newClient(t, fmt.Sprintf("http://127.0.0.1:%d", port))
		}
		c.AfterReload()
	}
	before := time.Now()
	load("load", "200ms")
	starts := func() (quick, soon int64) {
		t.Helper()
		q, s := c.Get("/seckill/quick", ""), c.Get("/seckill/soon", "")
		if q.Status != http.StatusOK || s.Status != http.StatusOK {
			t.Fatalf("status: %s; %s", q, s)
		}
		return q.Num("start_ms"), s.Num("start_ms")
	}
	quickStart, soonStart := starts()
	if quickStart < before.Add(time.Second).UnixMilli()-1000 || soonStart < before.Add(time.Hour).UnixMilli()-1000 {
		t.Fatalf("start_in: quick starts at %d, soon at %d; loaded at %d", quickStart, soonStart, before.UnixMilli())
	}

	alice, bob, carol := token(t, "alice"), token(t, "bob"), token(t, "carol")
	expect(t, "alice buys", c.Post(buyPath(t, c, "r", alice), alice, ""), http.StatusAccepted, "queued")
	aliceOrder := waitResult(t, c, "r", alice, "pending_payment").Str("order_id")
	first := app(t).OrdersBackend()
	if first == nil {
		t.Fatal("no order backend running")
	}

	load("unchanged reload", "200ms")
	if app(t).OrdersBackend() != first {
		t.Error("an unchanged reload restarted the order backend")
	}
	expect(t, "alice pays after the reload", c.Post("/orders/"+aliceOrder+"/pay", alice, ""), http.StatusOK, "paid")
	expect(t, "bob buys after the reload", c.Post(buyPath(t, c, "r", bob), bob, ""), http.StatusAccepted, "queued")
	waitResult(t, c, "r", bob, "pending_payment")
	// The same backend counts on: alice's and bob's orders, alice's payment.
	expectMetrics(t, c, "after the unchanged reload", map[string]float64{
		"caddy_seckill_orders_created_total": 2, "caddy_seckill_orders_paid_total": 1})

	// Once quick has opened, a reload must find the same definition (its stored start), not a
	// running sale whose start moved.
	eventually(t, "quick opens", func() (bool, string) {
		r := c.Get("/seckill/quick", "")
		return r.Str("state") == "open", r.String()
	})
	load("reload after a start_in sale opened", "200ms")
	if q, s := starts(); q != quickStart || s != soonStart {
		t.Errorf("a reload moved the starts: quick %d → %d, soon %d → %d", quickStart, q, soonStart, s)
	}

	load("reload with another sweep interval", "300ms")
	second := app(t).OrdersBackend()
	if second == nil || second == first {
		t.Fatalf("a changed orders configuration kept the old backend (%p, %p)", first, second)
	}
	expect(t, "carol buys after the change", c.Post(buyPath(t, c, "r", carol), carol, ""), http.StatusAccepted, "queued")
	waitResult(t, c, "r", carol, "pending_payment")
	waitResult(t, c, "r", bob, "cancelled") // the new sweeper expires bob's order
	waitResult(t, c, "r", alice, "paid")
	// The new backend's counters: carol's order and bob's expiry, none of the old backend's.
	expectMetrics(t, c, "after the changed reload", map[string]float64{
		"caddy_seckill_orders_created_total": 1, "caddy_seckill_orders_expired_total": 1, "caddy_seckill_orders_paid_total": 0})
	if q, s := starts(); q != quickStart || s != soonStart {
		t.Errorf("a reload moved the starts: quick %d → %d, soon %d → %d", quickStart, q, soonStart, s)
	}
}

// expectMetrics fails unless /metrics holds every sample of want (series → value).
func expectMetrics(t *testing.T, c *client, what string, want map[string]float64) {
	t.Helper()
	raw := string(c.Get("/metrics", "").Raw)
	for series, v := range want {
		if got := metricValue(t, raw, series); got != v {
			t.Errorf("%s: %s = %v, want %v", what, series, got, v)
		}
	}
}
