package caddymodule_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/caddymodule"
	"github.com/caddy-seckill/caddy-seckill/payments/webhookpay"
)

const shopSecret = "seckill-webhook-test-secret"

// payService is a shop's payment service for payments webhook (payments/webhookpay/README.md):
// it verifies every request's signature, keeps what it was asked by key, answers a charge pending
// with the page where the buyer pays, and signs its answers.
type payService struct {
	mu      sync.Mutex
	charged map[string]webhookpay.Request
	paid    map[string]bool
	refunds map[string]int
	srv     *httptest.Server
}

func newPayService(t *testing.T) *payService {
	s := &payService{charged: map[string]webhookpay.Request{}, paid: map[string]bool{}, refunds: map[string]int{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := webhookpay.Verify([]byte(shopSecret), r.Header.Get(webhookpay.SignatureHeader), body, time.Now(), time.Minute); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var req webhookpay.Request
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		a := webhookpay.Answer{Outcome: "failed"}
		switch req.Type {
		case "charge":
			if _, ok := s.charged[req.Key]; !ok {
				s.charged[req.Key] = req
			}
			a = webhookpay.Answer{Outcome: "pending", Ref: "pay_" + req.Key, NextURL: "https://pay.shop.example/checkout/" + req.Key}
		case "lookup":
			if s.paid[req.Key] {
				a = webhookpay.Answer{Outcome: "succeeded", Ref: "pay_" + req.Key}
			} else if _, ok := s.charged[req.Key]; ok {
				a = webhookpay.Answer{Outcome: "pending", Ref: "pay_" + req.Key}
			}
		case "refund":
			if !s.paid[req.Key] || req.Amount != s.charged[req.Key].Amount {
				http.Error(w, "no such payment", http.StatusNotFound)
				return
			}
			s.refunds[req.Key]++
			a = webhookpay.Answer{Outcome: "refunded", Ref: "pay_" + req.Key}
		}
		out, _ := json.Marshal(a)
		w.Header().Set(webhookpay.SignatureHeader, webhookpay.Sign([]byte(shopSecret), time.Now(), out))
		_, _ = w.Write(out)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// buyerPaid is the shop's side of a buyer paying on its page: the charge succeeds and the
// notification is made, signed (the caller posts it).
func (s *payService) buyerPaid(key, event string) (body, signature string) {
	s.mu.Lock()
	s.paid[key] = true
	s.mu.Unlock()
	b, _ := json.Marshal(webhookpay.Event{ID: event, Key: key, Outcome: "succeeded", Ref: "pay_" + key})
	return string(b), webhookpay.Sign([]byte(shopSecret), time.Now(), b)
}

func (s *payService) refunded(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refunds[key]
}

// TestOrdersWebhook runs payments webhook end to end through Caddy and the embedded order backend:
// the pay call answers 202 with the shop's next_url, the shop's signed notification pays the
// order (a replay is 200 duplicate; bad signatures and unknown attempts are refused and change
// nothing), and a success notified after the window closed is refunded once by the sweeper while
// the item is sold again; reconcile holds.
func TestOrdersWebhook(t *testing.T) {
	shop := newPayService(t)
	db := filepath.Join(t.TempDir(), "orders.db")
	orders := "orders sqlite " + db + " {\n\tsweep_every 200ms\n\tconsumer_name test-node\n" +
		"\tpayments webhook {\n\t\turl " + shop.srv.URL + "\n\t\tsecret " + shopSecret + "\n\t}\n}\n"
	paid := strings.Replace(saleBlock("whpaid", 1), "\tlimit 1\n", "\tlimit 1\n\tprice 19.99 USD\n", 1)
	late := strings.Replace(saleBlock("whlate", 1), "\tlimit 1\n", "\tlimit 1\n\tprice 5 EUR\n", 1)
	late = strings.Replace(late, "pay_within 5s", "pay_within 1s", 1)
	s := startSale(t, jwtBlock+"captcha off\n"+orders+paid+late)
	c := s.Client
	const hook = "/orders/webhooks/webhook"

	alice := token(t, "alice")
	expect(t, "alice buys", c.Post(buyPath(t, c, "whpaid", alice), alice, ""), http.StatusAccepted, "queued")
	order := waitResult(t, c, "whpaid", alice, "pending_payment").Str("order_id")
	key := order + "-1"
	pending := c.Post("/orders/"+order+"/pay", alice, "")
	expect(t, "alice pays", pending, http.StatusAccepted, "payment_pending")
	if pending.Str("next_url") != "https://pay.shop.example/checkout/"+key {
		t.Fatalf("pay answer: %s", pending)
	}
	if got := shop.charged[key]; got.Amount != 1999 || got.Currency != "USD" || got.OrderID != order {
		t.Fatalf("the shop was asked %+v", got)
	}

	body, sig := shop.buyerPaid(key, "evt_alice")
	expect(t, "unsigned", c.Post(hook, "", body), http.StatusBadRequest, "bad_signature")
	expect(t, "signed with another secret", c.Post(hook, "", body, webhookpay.SignatureHeader,
		webhookpay.Sign([]byte("another-secret-of-16"), time.Now(), []byte(body))), http.StatusBadRequest, "bad_signature")
	expect(t, "signed long ago", c.Post(hook, "", body, webhookpay.SignatureHeader,
		webhookpay.Sign([]byte(shopSecret), time.Now().Add(-time.Hour), []byte(body))), http.StatusBadRequest, "bad_signature")
	unknown, usig := shop.buyerPaid(order+"-7", "evt_unknown")
	expect(t, "unknown attempt", c.Post(hook, "", unknown, webhookpay.SignatureHeader, usig), http.StatusNotFound, "unknown_payment")
	expect(t, "still pending", c.Get("/orders/"+order, alice), http.StatusOK, "pending_payment")
	expect(t, "the notification", c.Post(hook, "", body, webhookpay.SignatureHeader, sig), http.StatusOK, "stored")
	expect(t, "replayed", c.Post(hook, "", body, webhookpay.SignatureHeader, sig), http.StatusOK, "duplicate")
	expect(t, "paid", c.Get("/orders/"+order, alice), http.StatusOK, "paid")
	waitResult(t, c, "whpaid", alice, "paid")

	// Bob's window closes before his payment is confirmed: the order is cancelled and the item
	// sold to carol; the success notified afterwards is refunded once.
	bob, carol := token(t, "bob"), token(t, "carol")
	expect(t, "bob buys", c.Post(buyPath(t, c, "whlate", bob), bob, ""), http.StatusAccepted, "queued")
	bobOrder := waitResult(t, c, "whlate", bob, "pending_payment").Str("order_id")
	expect(t, "bob pays", c.Post("/orders/"+bobOrder+"/pay", bob, ""), http.StatusAccepted, "payment_pending")
	waitResult(t, c, "whlate", bob, "cancelled")
	expect(t, "carol buys", c.Post(buyPath(t, c, "whlate", carol), carol, ""), http.StatusAccepted, "queued")
	waitResult(t, c, "whlate", carol, "pending_payment")
	late1, lsig := shop.buyerPaid(bobOrder+"-1", "evt_bob")
	r := c.Post(hook, "", late1, webhookpay.SignatureHeader, lsig)
	expect(t, "bob's late success", r, http.StatusOK, "stored")
	if r.Str("payment_status") != "refund_due" || r.Str("order_status") != "cancelled" {
		t.Fatalf("late success: %s", r)
	}
	eventually(t, "bob refunded", func() (bool, string) { return shop.refunded(bobOrder+"-1") == 1, "" })
	expect(t, "bob's success replayed", c.Post(hook, "", late1, webhookpay.SignatureHeader, lsig), http.StatusOK, "duplicate")
	time.Sleep(500 * time.Millisecond) // a few more sweeps
	if n := shop.refunded(bobOrder + "-1"); n != 1 {
		t.Errorf("bob refunded %d times", n)
	}
	eventually(t, "reconcile", func() (bool, string) { return s.ReconcileOK(t) })
	_, rec := s.AdminCall(t, http.MethodGet, "/seckill/reconcile", "")
	t.Logf("reconcile: %s", rec)
	// The admin API's reconcile shows the money: alice's charge paid her order, bob's was
	// refunded, none stands unpaid.
	var ans caddymodule.ReconcileAnswer
	if err := json.Unmarshal(rec, &ans); err != nil {
		t.Fatalf("reconcile answer: %v", err)
	}
	money := map[string][5]int64{}
	for _, r := range ans.Reports {
		money[r.Activity] = [5]int64{r.Charges, r.ChargedAmount, r.Refunds, r.RefundedAmount, r.ChargedUnpaid + r.UnsettledPayments}
	}
	if money["whpaid"] != [5]int64{1, 1999, 0, 0, 0} || money["whlate"] != [5]int64{1, 500, 1, 500, 0} {
		t.Errorf("reconcile money (charges, charged, refunds, refunded, unpaid+unsettled) = %v", money)
	}

	// The notifications are counted on the gateway's /metrics, a provider named by the caller
	// under "unknown" (bounded labels), and the counters not hit yet at 0.
	expect(t, "a made-up provider", c.Post("/orders/webhooks/made-up", "", body), http.StatusNotFound, "not_found")
	mt := string(c.Get("/metrics", "").Raw)
	for series, want := range map[string]float64{
		`caddy_seckill_orders_notifications_total{provider="webhook",result="stored"}`:                   2,
		`caddy_seckill_orders_notifications_total{provider="webhook",result="duplicate"}`:                2,
		`caddy_seckill_orders_notifications_total{provider="webhook",result="ignored"}`:                  0,
		`caddy_seckill_orders_notifications_refused_total{provider="webhook",reason="bad_signature"}`:    3,
		`caddy_seckill_orders_notifications_refused_total{provider="webhook",reason="unknown_payment"}`:  1,
		`caddy_seckill_orders_notifications_refused_total{provider="webhook",reason="bad_notification"}`: 0,
		`caddy_seckill_orders_notifications_refused_total{provider="unknown",reason="unknown_provider"}`: 1,
	} {
		if got := metricValue(t, mt, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	if strings.Contains(mt, "made-up") {
		t.Error("/metrics carries the caller's provider name")
	}
}
