package caddymodule_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// waitResult polls the buyer's result until its code is want, and returns it.
func waitResult(t *testing.T, c *client, activity, tok, want string) response {
	t.Helper()
	var r response
	eventually(t, "result "+want, func() (bool, string) {
		r = c.Get("/seckill/"+activity+"/result", tok)
		return r.Status == http.StatusOK && r.Code() == want, r.String()
	})
	return r
}

// orderFlow is test 6 of issue 4 on a 2-item activity: buy → pending_payment → pay → paid; a
// winner who does not pay → cancelled, stock back, a third buyer buys it; a late payment → 409
// expired; someone else's order → 404; the owner's cancel gives the item back too. It returns the
// reservation of the paid order.
func orderFlow(t *testing.T, c *client, act string) string {
	alice, bob, carol := token(t, "alice"), token(t, "bob"), token(t, "carol")
	alicePath, bobPath, carolPath := buyPath(t, c, act, alice), buyPath(t, c, act, bob), buyPath(t, c, act, carol)

	expect(t, "alice buys", c.Post(alicePath, alice, ""), http.StatusAccepted, "queued")
	expect(t, "bob buys", c.Post(bobPath, bob, ""), http.StatusAccepted, "queued")
	expect(t, "carol is too late", c.Post(carolPath, carol, ""), http.StatusGone, "sold_out")

	// Alice's win becomes an order and she pays it.
	ar := waitResult(t, c, act, alice, "pending_payment")
	aliceOrder := ar.Str("order_id")
	if aliceOrder == "" || ar.Num("pay_before_ms") <= time.Now().UnixMilli()-1000 {
		t.Fatalf("alice's result: %s", ar)
	}
	o := c.Get("/orders/"+aliceOrder, alice)
	expect(t, "alice's order", o, http.StatusOK, "pending_payment")
	if o.Str("order_id") != aliceOrder || o.Str("activity") != act || o.Num("qty") != 1 ||
		o.Str("reservation_id") != ar.Str("reservation_id") || o.Num("pay_before_ms") != ar.Num("pay_before_ms") {
		t.Errorf("alice's order: %s; result %s", o, ar)
	}
	expect(t, "bob reads alice's order", c.Get("/orders/"+aliceOrder, bob), http.StatusNotFound, "not_found")
	expect(t, "bob pays alice's order", c.Post("/orders/"+aliceOrder+"/pay", bob, ""), http.StatusNotFound, "not_found")
	expect(t, "bob cancels alice's order", c.Post("/orders/"+aliceOrder+"/cancel", bob, ""), http.StatusNotFound, "not_found")
	noToken := c.Post("/orders/"+aliceOrder+"/pay", "", "")
	expect(t, "pay without a token", noToken, http.StatusUnauthorized, "unauthorized")
	if noToken.Header.Get("WWW-Authenticate") == "" {
		t.Error("401 without WWW-Authenticate")
	}
	m := c.Get("/orders/"+aliceOrder+"/pay", alice)
	expect(t, "GET pay", m, http.StatusMethodNotAllowed, "method_not_allowed")
	if m.Header.Get("Allow") != http.MethodPost {
		t.Errorf("Allow = %q", m.Header.Get("Allow"))
	}
	expect(t, "no such order", c.Get("/orders/nosuchorder", alice), http.StatusNotFound, "not_found")
	expect(t, "no such call", c.Post("/orders/"+aliceOrder+"/refund", alice, ""), http.StatusNotFound, "not_found")

	paid := c.Post("/orders/"+aliceOrder+"/pay", alice, "")
	expect(t, "alice pays", paid, http.StatusOK, "paid")
	if paid.Str("status") != "paid" || paid.Num("paid_ms") == 0 {
		t.Errorf("paid order: %s", paid)
	}
	expect(t, "alice pays again", c.Post("/orders/"+aliceOrder+"/pay", alice, ""), http.StatusOK, "paid")
	expect(t, "alice cancels a paid order", c.Post("/orders/"+aliceOrder+"/cancel", alice, ""), http.StatusConflict, "paid")
	waitResult(t, c, act, alice, "paid")

	// Bob does not pay: the sweeper cancels his order and the item goes back on sale. (His
	// window may already have closed on a slow machine: either state names the order.)
	var br response
	eventually(t, "bob's order", func() (bool, string) {
		br = c.Get("/seckill/"+act+"/result", bob)
		return br.Code() == "pending_payment" || br.Code() == "cancelled", br.String()
	})
	bobOrder := br.Str("order_id")
	expect(t, "carol pays bob's order", c.Post("/orders/"+bobOrder+"/pay", carol, ""), http.StatusNotFound, "not_found")
	waitResult(t, c, act, bob, "cancelled")
	late := c.Post("/orders/"+bobOrder+"/pay", bob, "")
	expect(t, "bob pays late", late, http.StatusConflict, "expired")
	eventually(t, "bob's item back in stock", func() (bool, string) {
		n := remaining(t, act)
		return n == 1, fmt.Sprint("remaining ", n)
	})

	// Carol buys the item bob did not pay for, then changes her mind.
	eventually(t, "carol buys the released item", func() (bool, string) {
		r := c.Post(carolPath, carol, "")
		return r.Status == http.StatusAccepted && r.Code() == "queued", r.String()
	})
	cr := waitResult(t, c, act, carol, "pending_payment")
	carolOrder := cr.Str("order_id")
	expect(t, "carol cancels", c.Post("/orders/"+carolOrder+"/cancel", carol, ""), http.StatusOK, "cancelled")
	expect(t, "carol cancels again", c.Post("/orders/"+carolOrder+"/cancel", carol, ""), http.StatusOK, "cancelled")
	expect(t, "carol pays a cancelled order", c.Post("/orders/"+carolOrder+"/pay", carol, ""), http.StatusConflict, "expired")
	waitResult(t, c, act, carol, "cancelled")
	eventually(t, "carol's item back in stock", func() (bool, string) {
		n := remaining(t, act)
		return n == 1, fmt.Sprint("remaining ", n)
	})
	return ar.Str("reservation_id")
}

// runReconcile runs `caddy seckill reconcile` with args and returns its exit status and output.
func runReconcile(t *testing.T, bin string, args ...string) (int, string) {
	t.Helper()
	out, err := exec.Command(bin, append([]string{"seckill", "reconcile"}, args...)...).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	}
	t.Fatalf("seckill reconcile: %v", err)
	return 0, ""
}

// TestOrdersSQLite is test 6 of issue 4 on the embedded shape (memory store, SQLite file), plus
// an activity created through the admin API, the order metrics, and `caddy seckill reconcile`
// through the admin API (the memory store lives only in the Caddy process).
func TestOrdersSQLite(t *testing.T) {
	db := filepath.Join(t.TempDir(), "orders.db")
	s := startSale(t, jwtBlock+"captcha off\n"+ordersOption("sqlite "+db)+saleBlock("e2e", 2))
	c := s.Client
	aliceReservation := orderFlow(t, c, "e2e")

	// An activity created later through the admin API is consumed too.
	now := time.Now()
	status, body := s.AdminCall(t, http.MethodPut, "/seckill/activities/later", fmt.Sprintf(
		`{"stock":1,"start":%q,"end":%q,"pay_within":"1m"}`,
		now.Add(-time.Minute).Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339)))
	if status != http.StatusOK {
		t.Fatalf("define later: %d %s", status, body)
	}
	dave := token(t, "dave")
	expect(t, "dave buys", c.Post(buyPath(t, c, "later", dave), dave, ""), http.StatusAccepted, "queued")
	dr := waitResult(t, c, "later", dave, "pending_payment")
	expect(t, "dave pays", c.Post("/orders/"+dr.Str("order_id")+"/pay", dave, ""), http.StatusOK, "paid")

	eventually(t, "reconcile", func() (bool, string) { return s.ReconcileOK(t) })

	mt := c.Get("/metrics", "")
	for _, want := range []string{
		"caddy_seckill_orders_created_total 4",
		"caddy_seckill_orders_paid_total 2",
		"caddy_seckill_orders_expired_total 1",
		"caddy_seckill_orders_cancelled_total 1",
		"caddy_seckill_orders_released_total 2",
		"caddy_seckill_orders_dead_lettered_total 0",
		`caddy_seckill_orders_backlog{activity="e2e"} 0`,
	} {
		if !strings.Contains(string(mt.Raw), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	counters := map[string]float64{}
	for _, line := range strings.Split(string(mt.Raw), "\n") {
		// The counters have no labels; the backlog has the activity, a bounded label, and the
		// payment notifications their fixed words (mock takes none: only the unknown provider's,
		// whatever its count).
		name, v, ok := strings.Cut(line, " ")
		if strings.HasPrefix(name, "caddy_seckill_orders_") && strings.Contains(name, "{") &&
			!strings.HasPrefix(name, `caddy_seckill_orders_backlog{activity="`) &&
			name != `caddy_seckill_orders_notifications_refused_total{provider="unknown",reason="unknown_provider"}` {
			t.Errorf("order metric with labels: %s", line)
		}
		if ok && strings.HasPrefix(name, "caddy_seckill_orders_") {
			counters[strings.TrimPrefix(name, "caddy_seckill_orders_")], _ = strconv.ParseFloat(v, 64)
		}
	}
	// The four wins went through batches and transactions: each counted once, however grouped.
	if w, tw := counters["batch_wins_total"], counters["transaction_wins_total"]; w != 4 || tw != 4 {
		t.Errorf("batch_wins_total %v, transaction_wins_total %v: want 4 each", w, tw)
	}
	if b, tx := counters["batches_total"], counters["transactions_total"]; b < 1 || b > 4 || tx < 1 || tx > b {
		t.Errorf("batches_total %v, transactions_total %v: want 1 <= transactions <= batches <= 4", b, tx)
	}

	if testing.Short() {
		return
	}
	bin := buildCaddy(t)
	code, out := runReconcile(t, bin, "--config", s.ConfigFile)
	if code != 0 || !strings.Contains(out, "activity e2e") || !strings.Contains(out, "activity later") ||
		strings.Contains(out, "VIOLATION") {
		t.Fatalf("reconcile: exit %d:\n%s", code, out)
	}
	code, out = runReconcile(t, bin, "--address", s.AdminAddr, "--activity", "e2e", "--json")
	if code != 0 || !strings.Contains(out, `"activity": "e2e"`) || strings.Contains(out, `"activity": "later"`) {
		t.Fatalf("reconcile --json --activity e2e: exit %d:\n%s", code, out)
	}

	// The admin API will not give a paid order's item back (TestAdminReleaseHeldOrder), so the
	// two sides stay in step...
	status, body = s.AdminCall(t, http.MethodPost, "/seckill/activities/e2e/release",
		fmt.Sprintf(`{"reservation_id":%q}`, aliceReservation))
	if status != http.StatusConflict || !strings.Contains(string(body), `"code":"order_holds_reservation"`) {
		t.Fatalf("release of a paid order's reservation: %d %s, want 409 order_holds_reservation", status, body)
	}
	if code, out = runReconcile(t, bin, "--config", s.ConfigFile, "--activity", "e2e"); code != 0 {
		t.Fatalf("reconcile after a refused release: exit %d:\n%s", code, out)
	}
	// ...and an item put back on sale in the database behind the store's back breaks "never
	// undersell", which reconcile reports.
	orders, err := sql.Open("sqlite", db+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = orders.Close() }()
	if _, err := orders.Exec(`UPDATE stock SET "left" = "left" + 1 WHERE activity = 'e2e'`); err != nil {
		t.Fatal(err)
	}
	code, out = runReconcile(t, bin, "--config", s.ConfigFile, "--activity", "e2e")
	if code != 1 || !strings.Contains(out, "VIOLATION: store remaining 1 != database left 2") {
		t.Fatalf("reconcile after a rogue change: exit %d, want 1:\n%s", code, out)
	}
	if code, out = runReconcile(t, bin, "--activity", "no/such"); code != 2 {
		t.Errorf("reconcile with a bad id: exit %d, want 2:\n%s", code, out)
	}
}

// TestOrdersRedisPostgres is test 6 of issue 4 on the production shape: a private redis-server and
// a private PostgreSQL; `caddy seckill reconcile --config` then connects to both itself.
func TestOrdersRedisPostgres(t *testing.T) {
	if _, err := testsrv.PostgresBinDir(); err != nil {
		t.Skip(err)
	}
	rd := testsrv.StartRedis(t)
	pg := testsrv.StartPostgres(t)
	dsn := pg.Database(t, "e2e")
	s := startSale(t, jwtBlock+"captcha off\nurl_secret test-url-secret\nstore redis "+rd.Addr+"\n"+
		ordersOption(fmt.Sprintf("postgres %q", dsn))+saleBlock("e2e", 2))
	orderFlow(t, s.Client, "e2e")
	eventually(t, "reconcile", func() (bool, string) { return s.ReconcileOK(t) })
	if testing.Short() {
		return
	}
	bin := buildCaddy(t)
	// Caddy keeps running; the command uses only the store and the database.
	code, out := runReconcile(t, bin, "--config", s.ConfigFile)
	if code != 0 || !strings.Contains(out, "activity e2e") || !strings.Contains(out, "OK: every invariant holds") {
		t.Fatalf("reconcile: exit %d:\n%s", code, out)
	}
}

// TestOrdersHandleErrors: the order API's refusals are caddyhttp errors that handle_errors can
// restyle, and seckill inside handle_errors writes the default JSON body of the others.
func TestOrdersHandleErrors(t *testing.T) {
	db := filepath.Join(t.TempDir(), "orders.db")
	base := startCaddy(t, jwtBlock+"captcha off\norders sqlite "+db+"\n"+saleBlock("he", 1),
		"route /orders/* {\n\tseckill_orders\n}\n"+
			"handle_errors {\n\t@nf expression `{http.seckill.code} == \"not_found\"`\n\trespond @nf \"no such order here\" 404\n\tseckill\n}\n")
	c := newClient(t, base)
	r := c.Get("/orders/nosuchorder", token(t, "alice"))
	if r.Status != http.StatusNotFound || string(r.Raw) != "no such order here" {
		t.Errorf("restyled not_found: %s", r)
	}
	u := c.Get("/orders/nosuchorder", "")
	expect(t, "default body", u, http.StatusUnauthorized, "unauthorized")
	if u.Header.Get("WWW-Authenticate") == "" {
		t.Error("401 without WWW-Authenticate")
	}
	m := c.Do(http.MethodDelete, "/orders/nosuchorder", token(t, "alice"), nil)
	expect(t, "method", m, http.StatusMethodNotAllowed, "method_not_allowed")
	if m.Header.Get("Allow") != http.MethodGet {
		t.Errorf("Allow %q", m.Header.Get("Allow"))
	}
}

// TestAdminReleaseHeldOrder: the admin API refuses to release a reservation that an order of the
// embedded backend holds, pending payment or paid (409 order_holds_reservation, naming the
// order): the item would go back on sale while its buyer may still pay for it or owns it, and be
// sold twice. A cancelled order's reservation, released by the relay, answers released false.
func TestAdminReleaseHeldOrder(t *testing.T) {
	db := filepath.Join(t.TempDir(), "orders.db")
	now := time.Now()
	s := startSale(t, jwtBlock+"captcha off\n"+ordersOption("sqlite "+db)+fmt.Sprintf(
		"activity held {\n\tstock 2\n\tlimit 1\n\tstart %s\n\tend %s\n\tpay_within 10m\n}\n",
		rfc3339(now.Add(-time.Minute)), rfc3339(now.Add(time.Hour))))
	c := s.Client
	release := func(resv string) (int, string) {
		status, body := s.AdminCall(t, http.MethodPost, "/seckill/activities/held/release", fmt.Sprintf(`{"reservation_id":%q}`, resv))
		return status, string(body)
	}
	refused := func(what, resv, orderID, orderStatus string) {
		t.Helper()
		status, body := release(resv)
		var ans struct {
			Error       string `json:"error"`
			Code        string `json:"code"`
			OrderID     string `json:"order_id"`
			OrderStatus string `json:"order_status"`
		}
		if status != http.StatusConflict || json.Unmarshal([]byte(body), &ans) != nil || ans.Code != "order_holds_reservation" ||
			ans.OrderID != orderID || ans.OrderStatus != orderStatus || ans.Error == "" {
			t.Errorf("%s: %d %s; want 409 order_holds_reservation naming order %s, %s", what, status, body, orderID, orderStatus)
		}
	}

	alice, bob := token(t, "alice"), token(t, "bob")
	expect(t, "alice buys", c.Post(buyPath(t, c, "held", alice), alice, ""), http.StatusAccepted, "queued")
	expect(t, "bob buys", c.Post(buyPath(t, c, "held", bob), bob, ""), http.StatusAccepted, "queued")
	ar := waitResult(t, c, "held", alice, "pending_payment")
	refused("release of a pending order's reservation", ar.Str("reservation_id"), ar.Str("order_id"), "pending_payment")
	expect(t, "alice pays", c.Post("/orders/"+ar.Str("order_id")+"/pay", alice, ""), http.StatusOK, "paid")
	refused("release of a paid order's reservation", ar.Str("reservation_id"), ar.Str("order_id"), "paid")
	if n := remaining(t, "held"); n != 0 {
		t.Fatalf("remaining %d after refused releases, want 0", n)
	}

	br := waitResult(t, c, "held", bob, "pending_payment")
	expect(t, "bob cancels", c.Post("/orders/"+br.Str("order_id")+"/cancel", bob, ""), http.StatusOK, "cancelled")
	eventually(t, "bob's item back in stock", func() (bool, string) {
		n := remaining(t, "held")
		return n == 1, fmt.Sprint("remaining ", n)
	})
	if status, body := release(br.Str("reservation_id")); status != http.StatusOK || !strings.Contains(body, `"released":false`) {
		t.Errorf("release of a cancelled order's reservation: %d %s; want 200 released false", status, body)
	}
	if n := remaining(t, "held"); n != 1 {
		t.Errorf("remaining %d, want 1", n)
	}
	eventually(t, "reconcile", func() (bool, string) { return s.ReconcileOK(t) })
}

// TestAdminReleaseWinInFlight: the admin release of a win that is not an order yet (the consumer
// is waiting out a locked order database) would put its item back on sale while the consumer
// still makes it a pending order: the item would be sold twice. The release must be refused,
// the win become alice's order, and bob find the activity sold out.
func TestAdminReleaseWinInFlight(t *testing.T) {
	db := filepath.Join(t.TempDir(), "orders.db")
	now := time.Now()
	s := startSale(t, jwtBlock+"captcha off\n"+ordersOption("sqlite "+db)+fmt.Sprintf(
		"activity fly {\n\tstock 1\n\tlimit 1\n\tstart %s\n\tend %s\n\tpay_within 10m\n}\n",
		rfc3339(now.Add(-time.Minute)), rfc3339(now.Add(time.Hour))))
	c := s.Client
	ctx := context.Background()
	orders, err := sql.Open("sqlite", db+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = orders.Close() }()
	lock, err := orders.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Close() }()
	// Hold the database's write lock: the consumer cannot make alice's win an order meanwhile.
	if _, err := lock.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	alice, bob := token(t, "alice"), token(t, "bob")
	won := c.Post(buyPath(t, c, "fly", alice), alice, "")
	expect(t, "alice buys", won, http.StatusAccepted, "queued")
	status, body := s.AdminCall(t, http.MethodPost, "/seckill/activities/fly/release",
		fmt.Sprintf(`{"reservation_id":%q}`, won.Str("reservation_id")))
	if _, err := lock.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if status != http.StatusConflict || !strings.Contains(string(body), `"code":"win_in_flight"`) {
		t.Errorf("release of a win in flight: %d %s; want 409 win_in_flight", status, body)
	}
	waitResult(t, c, "fly", alice, "pending_payment")
	if n := remaining(t, "fly"); n != 0 {
		t.Errorf("remaining %d while alice's order holds the only item, want 0", n)
	}
	if r := c.Post("/seckill/fly/path", bob, ""); r.Status != http.StatusGone {
		if r.Status == http.StatusOK {
			r = c.Post(r.Str("path"), bob, "")
		}
		t.Errorf("bob buys the item alice's pending order holds: %s; want 410 sold_out", r)
	}
}
