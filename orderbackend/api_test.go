package orderbackend

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/jwtauth"
	"github.com/caddy-seckill/caddy-seckill/money"
)

var apiScenarios = []scenario{
	{"OrderAPI", testOrderAPI},
	{"LatePaymentRefunded", testLatePaymentRefunded},
	{"PayBody", testPayBody},
}

var testSecret = []byte("0123456789abcdef0123456789abcdef")

func testAuth(t *testing.T) Authenticator {
	t.Helper()
	v, err := jwtauth.New(jwtauth.Config{Algorithms: []string{"HS256"}, HMACSecret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	return JWT(v)
}

func token(t *testing.T, user string) string {
	t.Helper()
	tok, err := jwtauth.Mint(jwtauth.MintConfig{Secret: testSecret, Subject: user, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// call sends a request to the API and decodes the JSON answer.
func call(t *testing.T, srv *httptest.Server, method, path, tok string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("%s %s: body is not JSON: %v", method, path, err)
	}
	if resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("%s %s: content type %q", method, path, resp.Header.Get("Content-Type"))
	}
	return resp.StatusCode, body
}

func expect(t *testing.T, srv *httptest.Server, method, path, tok string, status int, code string) map[string]any {
	t.Helper()
	got, body := call(t, srv, method, path, tok)
	if got != status || body["code"] != code {
		t.Fatalf("%s %s = %d %v, want %d %q", method, path, got, body, status, code)
	}
	return body
}

// testListing prices every activity of startBackend's backends.
var testListing = Listing{Price: money.Price{Amount: 19900, Currency: "USD"}, Title: "Phone X"}

// startBackend runs a whole Backend on the env with fast settings and serves its API.
func (e *env) startBackend(t *testing.T, pay Payments, settleAfter time.Duration) (*Backend, *httptest.Server) {
	t.Helper()
	co := e.consumerOpts("", nil)
	co.Listing = func(string) Listing { return testListing }
	b, err := New(Config{
		Store: e.store, Repo: e.repo, Auth: testAuth(t), Payments: pay, Name: "node-1",
		Consumer: co,
		Sweeper:  SweeperOptions{Every: 20 * time.Millisecond, SettleAfter: settleAfter},
		Relay:    RelayOptions{Every: 20 * time.Millisecond},
		Discover: 20 * time.Millisecond,
		Logger:   e.log,
	})
	if err != nil {
		t.Fatal(err)
	}
	start(t, b.Run)
	srv := httptest.NewServer(b.Handler())
	t.Cleanup(srv.Close)
	return b, srv
}

// The API half of the end-to-end test (without Caddy in front): a winner pays, another
// does not and is cancelled with the stock given back, a third buys it, a late payment is refused,
// and nobody sees or pays someone else's order.
func testOrderAPI(t *testing.T, e *env) {
	e.openActivity(t, "sale", 2, 1, 2*time.Second)
	pay := newRecorder()
	b, srv := e.startBackend(t, pay, 0)
	e.admit(t, "sale", "u1", 1)
	e.admit(t, "sale", "u2", 1)
	eventually(t, "u1 pending", func() bool { return e.result(t, "sale", "u1").Code == resultPending })
	eventually(t, "u2 pending", func() bool { return e.result(t, "sale", "u2").Code == resultPending })
	o1, o2 := e.result(t, "sale", "u1").OrderID, e.result(t, "sale", "u2").OrderID
	t1, t2 := token(t, "u1"), token(t, "u2")

	// Reading: the owner only; everyone else sees nothing there.
	body := expect(t, srv, "GET", "/orders/"+o1, t1, 200, "pending_payment")
	if body["order_id"] != o1 || body["activity"] != "sale" || body["qty"] != 1.0 || body["pay_before_ms"] == nil ||
		body["amount"] != 19900.0 || body["currency"] != "USD" || body["title"] != "Phone X" {
		t.Errorf("order = %v", body)
	}
	expect(t, srv, "GET", "/orders/"+o1, t2, 404, "not_found")
	expect(t, srv, "GET", "/orders/nope", t1, 404, "not_found")
	expect(t, srv, "GET", "/orders/"+o1, "", 401, "unauthorized")
	expect(t, srv, "GET", "/orders/"+o1, "not-a-jwt", 401, "unauthorized")
	expect(t, srv, "GET", "/orders/"+o1+"/refund", t1, 404, "not_found")
	expect(t, srv, "GET", "/elsewhere", t1, 404, "not_found")
	expect(t, srv, "GET", "/orders/"+o1+"/pay", t1, 405, "method_not_allowed")
	expect(t, srv, "POST", "/orders/"+o1, t1, 405, "method_not_allowed")

	// Paying someone else's order is refused like a missing order, and charges nothing.
	expect(t, srv, "POST", "/orders/"+o1+"/pay", t2, 404, "not_found")
	if pay.Charged(o1) != 0 {
		t.Fatal("someone else's payment was charged")
	}
	// The owner pays; paying again is answered paid without a second charge.
	expect(t, srv, "POST", "/orders/"+o1+"/pay", t1, 200, "paid")
	expect(t, srv, "POST", "/orders/"+o1+"/pay", t1, 200, "paid")
	if n := pay.Charged(o1); n != 1 {
		t.Errorf("%d charges of a paid order, want 1", n)
	}
	eventually(t, "u1 paid", func() bool { return e.result(t, "sale", "u1").Code == "paid" })
	expect(t, srv, "POST", "/orders/"+o1+"/cancel", t1, 409, "paid")

	// u2 does not pay: the sweeper cancels, the relay releases, a third buyer gets the item.
	eventually(t, "u2 cancelled", func() bool { return e.result(t, "sale", "u2").Code == "cancelled" })
	eventually(t, "stock back", func() bool { n, _ := e.store.Remaining(context.Background(), "sale"); return n == 1 })
	expect(t, srv, "POST", "/orders/"+o2+"/pay", t2, 409, "expired")
	if pay.Charged(o2) != 0 {
		t.Error("a late payment was charged")
	}
	e.admit(t, "sale", "u3", 1)
	eventually(t, "u3 pending", func() bool { return e.result(t, "sale", "u3").Code == resultPending })
	o3, t3 := e.result(t, "sale", "u3").OrderID, token(t, "u3")

	// u3 changes their mind: cancelled (twice is the same answer), stock back in both places.
	expect(t, srv, "POST", "/orders/"+o3+"/cancel", t3, 200, "cancelled")
	expect(t, srv, "POST", "/orders/"+o3+"/cancel", t3, 200, "cancelled")
	eventually(t, "u3 cancelled", func() bool { return e.result(t, "sale", "u3").Code == "cancelled" })
	eventually(t, "stock back again", func() bool { n, _ := e.store.Remaining(context.Background(), "sale"); return n == 1 })

	rep := e.eventuallyReconciled(t, "sale")
	if rep.Paid != 1 || rep.Cancelled != 2 || rep.DBLeft != 1 {
		t.Errorf("report = %+v", rep)
	}
	if m := b.Metrics(); m.Paid != 1 || m.Expired != 1 || m.Cancelled != 1 || m.Released != 2 || m.OrdersCreated != 3 {
		t.Errorf("metrics = %+v", m)
	}
}

// The payment window closes between the attempt's start and the provider's success: the success
// cannot pay the order, the charge is refunded once and recorded, and the buyer gets 409 expired.
func testLatePaymentRefunded(t *testing.T, e *env) {
	ctx := context.Background()
	if err := e.repo.EnsureStock(ctx, "sale", 1); err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	o, _, err := e.repo.CreateOrder(ctx, newOrder("sale", "r1", "u1", 1, exp))
	if err != nil {
		t.Fatal(err)
	}
	// The first reading of the clock (the API's check) is just inside the window, the second (the
	// update, after the provider answered) just outside.
	clock := []time.Time{exp.Add(-time.Millisecond), exp}
	pay := newRecorder()
	api, err := NewAPI(e.repo, APIOptions{Auth: testAuth(t), Payments: pay, Logger: e.log, Now: func() time.Time {
		now := clock[0]
		if len(clock) > 1 {
			clock = clock[1:]
		}
		return now
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	expect(t, srv, "POST", "/orders/"+o.ID+"/pay", token(t, "u1"), 409, "expired")
	if pay.Charged(o.ID) != 1 || pay.Refunded(o.ID) != 1 {
		t.Errorf("charged %d refunded %d; want one charge refunded once", pay.Charged(o.ID), pay.Refunded(o.ID))
	}
	ps, err := e.repo.Payments(ctx, "sale")
	if err != nil || len(ps) != 1 || ps[0].Status != PaymentRefunded || ps[0].Key != o.ID+"-1" {
		t.Errorf("payments = %+v, %v; want one refunded attempt", ps, err)
	}
	if got, _ := e.repo.Order(ctx, o.ID); got.Status != StatusPending {
		t.Errorf("order is %s, want still pending for the sweeper", got.Status)
	}
}

// methodRecorder is a recorder that, like Stripe, needs the buyer's payment method, and keeps the
// one each charge carried.
type methodRecorder struct {
	*recorder
	mu      sync.Mutex
	methods []string
}

func (m *methodRecorder) RequiresPaymentMethod() bool { return true }

func (m *methodRecorder) Charge(ctx context.Context, c ChargeRequest) (ChargeResult, error) {
	m.mu.Lock()
	m.methods = append(m.methods, c.PaymentMethod)
	m.mu.Unlock()
	return m.recorder.Charge(ctx, c)
}

// postBody sends a pay call with a body and decodes the answer.
func postBody(t *testing.T, srv *httptest.Server, path, tok, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&b); err != nil {
		t.Fatal(err)
	}
	code, _ := b["code"].(string)
	return resp.StatusCode, code
}

// The pay call's body: anything but {"payment_method":"<id>"} (or nothing) is 400 and records no
// attempt; a provider that needs a method gets 400 payment_method_required without one, and the
// method of a good body reaches the provider.
func testPayBody(t *testing.T, e *env) {
	e.openActivity(t, "sale", 1, 1, time.Minute)
	pay := &methodRecorder{recorder: newRecorder()}
	_, srv := e.startBackend(t, pay, 0)
	e.admit(t, "sale", "u1", 1)
	eventually(t, "u1 pending", func() bool { return e.result(t, "sale", "u1").Code == resultPending })
	o1, t1 := e.result(t, "sale", "u1").OrderID, token(t, "u1")
	path := "/orders/" + o1 + "/pay"
	for _, c := range []struct {
		body, code string
	}{
		{`{"payment_method":"pm_1","amount":1}`, "bad_request"},
		{`{"payment_method":"pm 1"}`, "bad_request"},
		{`{"payment_method":""}`, "bad_request"},
		{`{"payment_method":"` + strings.Repeat("p", 256) + `"}`, "bad_request"},
		{`{"payment_method":1}`, "bad_request"},
		{`{"payment_method":"pm_1"} {}`, "bad_request"},
		{`[1]`, "bad_request"},
		{strings.Repeat(" ", 5000), "bad_request"},
		{``, "payment_method_required"},
		{`{}`, "payment_method_required"},
	} {
		if status, code := postBody(t, srv, path, t1, c.body); status != 400 || code != c.code {
			t.Errorf("pay with %.40q = %d %s; want 400 %s", c.body, status, code, c.code)
		}
	}
	if ps, err := e.repo.Payments(context.Background(), "sale"); err != nil || len(ps) != 0 || pay.Charged(o1) != 0 {
		t.Fatalf("refused bodies recorded %v (%v) or charged %d", ps, err, pay.Charged(o1))
	}
	if status, code := postBody(t, srv, path, t1, `{"payment_method":"pm_1QyZ2aB7WZ01zgkW"}`); status != 200 || code != "paid" {
		t.Fatalf("pay = %d %s", status, code)
	}
	pay.mu.Lock()
	defer pay.mu.Unlock()
	if len(pay.methods) != 1 || pay.methods[0] != "pm_1QyZ2aB7WZ01zgkW" {
		t.Errorf("methods charged %q", pay.methods)
	}
}
