package caddymodule_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// ordersSite serves the edge, the embedded order API, the demo sign-in and the metrics.
const ordersSite = route + "route /orders/* {\n\tseckill_orders\n}\n" +
	"route /demo/token {\n\tseckill_demo_signin\n}\nmetrics /metrics\n"

// payWindow is the test activities' pay_within: short, so that an unpaid order expires within the
// test, yet long enough for a buyer who pays at once.
const payWindow = 5 * time.Second

// saleBlock is the Caddyfile block of an activity open now with the test's payment window.
func saleBlock(id string, stock int) string {
	now := time.Now()
	return fmt.Sprintf("activity %s {\n\tstock %d\n\tlimit 1\n\tstart %s\n\tend %s\n\tpay_within %s\n}\n",
		id, stock, rfc3339(now.Add(-time.Minute)), rfc3339(now.Add(time.Hour)), payWindow)
}

// ordersOption runs the embedded order backend on db ("sqlite <file>" or "postgres <dsn>") with a
// quick sweeper.
func ordersOption(db string) string {
	return "orders " + db + " {\n\tsweep_every 200ms\n\tconsumer_name test-node\n}\n"
}

// sale is a running Caddy with the order backend.
type sale struct {
	c         *client
	admin     string // base URL of the admin endpoint
	adminAddr string
	caddyfile string // the Caddyfile, written to a file for the command line
}

// startSale loads a Caddyfile with the admin endpoint on, serving ordersSite.
func startSale(t *testing.T, seckill string) sale {
	t.Helper()
	port := freePort(t)
	s := sale{adminAddr: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	s.admin = "http://" + s.adminAddr
	text := caddyfileAdmin(t, s.adminAddr, port, seckill, ordersSite)
	s.caddyfile = filepath.Join(t.TempDir(), "Caddyfile")
	if err := os.WriteFile(s.caddyfile, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	runCaddyfile(t, text)
	s.c = newClient(t, fmt.Sprintf("http://127.0.0.1:%d", port))
	return s
}

// adminCall calls the admin endpoint and returns the status and body.
func (s sale) adminCall(t *testing.T, method, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, s.admin+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, b
}

// reconcileOK asks the running app to reconcile through the admin API.
func (s sale) reconcileOK(t *testing.T) (bool, string) {
	t.Helper()
	status, body := s.adminCall(t, http.MethodGet, "/seckill/reconcile", "")
	var ans struct {
		OK bool `json:"ok"`
	}
	if status != http.StatusOK || json.Unmarshal(body, &ans) != nil {
		return false, fmt.Sprintf("%d %s", status, body)
	}
	return ans.OK, string(body)
}

// eventually polls cond until it holds, for at most 20 s (a bound on a hung test, not a timing
// assertion); last describes what cond saw.
func eventually(t *testing.T, what string, cond func() (ok bool, last string)) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: gave up waiting; last: %s", what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitResult polls the buyer's result until its code is want, and returns it.
func waitResult(t *testing.T, c *client, activity, tok, want string) response {
	t.Helper()
	var r response
	eventually(t, "result "+want, func() (bool, string) {
		r = c.get("/seckill/"+activity+"/result", tok)
		return r.status == http.StatusOK && r.code() == want, r.String()
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

	expect(t, "alice buys", c.post(alicePath, alice, ""), http.StatusAccepted, "queued")
	expect(t, "bob buys", c.post(bobPath, bob, ""), http.StatusAccepted, "queued")
	expect(t, "carol is too late", c.post(carolPath, carol, ""), http.StatusGone, "sold_out")

	// Alice's win becomes an order and she pays it.
	ar := waitResult(t, c, act, alice, "pending_payment")
	aliceOrder := ar.str("order_id")
	if aliceOrder == "" || ar.num("pay_before_ms") <= time.Now().UnixMilli()-1000 {
		t.Fatalf("alice's result: %s", ar)
	}
	o := c.get("/orders/"+aliceOrder, alice)
	expect(t, "alice's order", o, http.StatusOK, "pending_payment")
	if o.str("order_id") != aliceOrder || o.str("activity") != act || o.num("qty") != 1 ||
		o.str("reservation_id") != ar.str("reservation_id") || o.num("pay_before_ms") != ar.num("pay_before_ms") {
		t.Errorf("alice's order: %s; result %s", o, ar)
	}
	expect(t, "bob reads alice's order", c.get("/orders/"+aliceOrder, bob), http.StatusNotFound, "not_found")
	expect(t, "bob pays alice's order", c.post("/orders/"+aliceOrder+"/pay", bob, ""), http.StatusNotFound, "not_found")
	expect(t, "bob cancels alice's order", c.post("/orders/"+aliceOrder+"/cancel", bob, ""), http.StatusNotFound, "not_found")
	noToken := c.post("/orders/"+aliceOrder+"/pay", "", "")
	expect(t, "pay without a token", noToken, http.StatusUnauthorized, "unauthorized")
	if noToken.header.Get("WWW-Authenticate") == "" {
		t.Error("401 without WWW-Authenticate")
	}
	m := c.get("/orders/"+aliceOrder+"/pay", alice)
	expect(t, "GET pay", m, http.StatusMethodNotAllowed, "method_not_allowed")
	if m.header.Get("Allow") != http.MethodPost {
		t.Errorf("Allow = %q", m.header.Get("Allow"))
	}
	expect(t, "no such order", c.get("/orders/nosuchorder", alice), http.StatusNotFound, "not_found")
	expect(t, "no such call", c.post("/orders/"+aliceOrder+"/refund", alice, ""), http.StatusNotFound, "not_found")

	paid := c.post("/orders/"+aliceOrder+"/pay", alice, "")
	expect(t, "alice pays", paid, http.StatusOK, "paid")
	if paid.str("status") != "paid" || paid.num("paid_ms") == 0 {
		t.Errorf("paid order: %s", paid)
	}
	expect(t, "alice pays again", c.post("/orders/"+aliceOrder+"/pay", alice, ""), http.StatusOK, "paid")
	expect(t, "alice cancels a paid order", c.post("/orders/"+aliceOrder+"/cancel", alice, ""), http.StatusConflict, "paid")
	waitResult(t, c, act, alice, "paid")

	// Bob does not pay: the sweeper cancels his order and the item goes back on sale. (His
	// window may already have closed on a slow machine: either state names the order.)
	var br response
	eventually(t, "bob's order", func() (bool, string) {
		br = c.get("/seckill/"+act+"/result", bob)
		return br.code() == "pending_payment" || br.code() == "cancelled", br.String()
	})
	bobOrder := br.str("order_id")
	expect(t, "carol pays bob's order", c.post("/orders/"+bobOrder+"/pay", carol, ""), http.StatusNotFound, "not_found")
	waitResult(t, c, act, bob, "cancelled")
	late := c.post("/orders/"+bobOrder+"/pay", bob, "")
	expect(t, "bob pays late", late, http.StatusConflict, "expired")
	eventually(t, "bob's item back in stock", func() (bool, string) {
		n := remaining(t, act)
		return n == 1, fmt.Sprint("remaining ", n)
	})

	// Carol buys the item bob did not pay for, then changes her mind.
	eventually(t, "carol buys the released item", func() (bool, string) {
		r := c.post(carolPath, carol, "")
		return r.status == http.StatusAccepted && r.code() == "queued", r.String()
	})
	cr := waitResult(t, c, act, carol, "pending_payment")
	carolOrder := cr.str("order_id")
	expect(t, "carol cancels", c.post("/orders/"+carolOrder+"/cancel", carol, ""), http.StatusOK, "cancelled")
	expect(t, "carol cancels again", c.post("/orders/"+carolOrder+"/cancel", carol, ""), http.StatusOK, "cancelled")
	expect(t, "carol pays a cancelled order", c.post("/orders/"+carolOrder+"/pay", carol, ""), http.StatusConflict, "expired")
	waitResult(t, c, act, carol, "cancelled")
	eventually(t, "carol's item back in stock", func() (bool, string) {
		n := remaining(t, act)
		return n == 1, fmt.Sprint("remaining ", n)
	})
	return ar.str("reservation_id")
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
	c := s.c
	aliceReservation := orderFlow(t, c, "e2e")

	// An activity created later through the admin API is consumed too.
	now := time.Now()
	status, body := s.adminCall(t, http.MethodPut, "/seckill/activities/later", fmt.Sprintf(
		`{"stock":1,"start":%q,"end":%q,"pay_within":"1m"}`,
		now.Add(-time.Minute).Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339)))
	if status != http.StatusOK {
		t.Fatalf("define later: %d %s", status, body)
	}
	dave := token(t, "dave")
	expect(t, "dave buys", c.post(buyPath(t, c, "later", dave), dave, ""), http.StatusAccepted, "queued")
	dr := waitResult(t, c, "later", dave, "pending_payment")
	expect(t, "dave pays", c.post("/orders/"+dr.str("order_id")+"/pay", dave, ""), http.StatusOK, "paid")

	eventually(t, "reconcile", func() (bool, string) { return s.reconcileOK(t) })

	mt := c.get("/metrics", "")
	for _, want := range []string{
		"caddy_seckill_orders_created_total 4",
		"caddy_seckill_orders_paid_total 2",
		"caddy_seckill_orders_expired_total 1",
		"caddy_seckill_orders_cancelled_total 1",
		"caddy_seckill_orders_released_total 2",
		"caddy_seckill_orders_dead_lettered_total 0",
		`caddy_seckill_orders_backlog{activity="e2e"} 0`,
	} {
		if !strings.Contains(string(mt.raw), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	counters := map[string]float64{}
	for _, line := range strings.Split(string(mt.raw), "\n") {
		// The counters have no labels; the backlog has the activity, a bounded label.
		if strings.HasPrefix(line, "caddy_seckill_orders_") && strings.Contains(line, "{") &&
			!strings.HasPrefix(line, `caddy_seckill_orders_backlog{activity="`) {
			t.Errorf("order metric with labels: %s", line)
		}
		if name, v, ok := strings.Cut(line, " "); ok && strings.HasPrefix(name, "caddy_seckill_orders_") {
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
	code, out := runReconcile(t, bin, "--config", s.caddyfile)
	if code != 0 || !strings.Contains(out, "activity e2e") || !strings.Contains(out, "activity later") ||
		strings.Contains(out, "VIOLATION") {
		t.Fatalf("reconcile: exit %d:\n%s", code, out)
	}
	code, out = runReconcile(t, bin, "--address", s.adminAddr, "--activity", "e2e", "--json")
	if code != 0 || !strings.Contains(out, `"activity": "e2e"`) || strings.Contains(out, `"activity": "later"`) {
		t.Fatalf("reconcile --json --activity e2e: exit %d:\n%s", code, out)
	}

	// Giving a paid order's item back behind the database's back breaks "never undersell".
	status, body = s.adminCall(t, http.MethodPost, "/seckill/activities/e2e/release",
		fmt.Sprintf(`{"reservation_id":%q}`, aliceReservation))
	if status != http.StatusOK || !strings.Contains(string(body), "true") {
		t.Fatalf("release: %d %s", status, body)
	}
	code, out = runReconcile(t, bin, "--config", s.caddyfile, "--activity", "e2e")
	if code != 1 || !strings.Contains(out, "VIOLATION: store remaining 2 != database left 1") {
		t.Fatalf("reconcile after a rogue release: exit %d, want 1:\n%s", code, out)
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
	orderFlow(t, s.c, "e2e")
	eventually(t, "reconcile", func() (bool, string) { return s.reconcileOK(t) })
	if testing.Short() {
		return
	}
	bin := buildCaddy(t)
	// Caddy keeps running; the command uses only the store and the database.
	code, out := runReconcile(t, bin, "--config", s.caddyfile)
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
	r := c.get("/orders/nosuchorder", token(t, "alice"))
	if r.status != http.StatusNotFound || string(r.raw) != "no such order here" {
		t.Errorf("restyled not_found: %s", r)
	}
	u := c.get("/orders/nosuchorder", "")
	expect(t, "default body", u, http.StatusUnauthorized, "unauthorized")
	if u.header.Get("WWW-Authenticate") == "" {
		t.Error("401 without WWW-Authenticate")
	}
	m := c.do(http.MethodDelete, "/orders/nosuchorder", token(t, "alice"), nil)
	expect(t, "method", m, http.StatusMethodNotAllowed, "method_not_allowed")
	if m.header.Get("Allow") != http.MethodGet {
		t.Errorf("Allow %q", m.header.Get("Allow"))
	}
}
