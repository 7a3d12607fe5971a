package caddymodule_test

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestOrdersStripe pays an order end to end through Caddy, the embedded order backend on SQLite
// and payments stripe against a private stripe-mock (Stripe's own mock, answering every
// PaymentIntent succeeded): a pay call without a payment method is refused and records nothing,
// one with it pays, again is answered paid, and reconcile counts the charge with nothing owed.
func TestOrdersStripe(t *testing.T) {
	sm := testsrv.StartStripeMock(t, testsrv.WithStripeFixture("payment_intent", map[string]any{"status": "succeeded"}))
	db := filepath.Join(t.TempDir(), "orders.db")
	orders := "orders sqlite " + db + " {\n\tsweep_every 200ms\n\tconsumer_name test-node\n" +
		"\tpayments stripe {\n\t\tsecret_key sk_test_seckill\n\t\tapi_base " + sm.URL + "\n\t}\n}\n"
	activity := strings.Replace(saleBlock("stripe", 1), "\tlimit 1\n", "\tlimit 1\n\tprice 1999 JPY\n", 1)
	s := startSale(t, jwtBlock+"captcha off\n"+orders+activity)
	c := s.Client

	alice := token(t, "alice")
	expect(t, "alice buys", c.Post(buyPath(t, c, "stripe", alice), alice, ""), http.StatusAccepted, "queued")
	order := waitResult(t, c, "stripe", alice, "pending_payment").Str("order_id")
	pay := "/orders/" + order + "/pay"
	expect(t, "pay without a method", c.Post(pay, alice, ""), http.StatusBadRequest, "payment_method_required")
	expect(t, "pay with a bad body", c.Post(pay, alice, `{"card":"4242"}`), http.StatusBadRequest, "bad_request")
	o := c.Get("/orders/"+order, alice)
	expect(t, "still pending", o, http.StatusOK, "pending_payment")
	if o.Num("amount") != 1999 || o.Str("currency") != "JPY" {
		t.Fatalf("order: %s", o)
	}
	paid := c.Post(pay, alice, `{"payment_method":"pm_card_visa"}`)
	expect(t, "alice pays", paid, http.StatusOK, "paid")
	expect(t, "alice pays again", c.Post(pay, alice, `{"payment_method":"pm_card_visa"}`), http.StatusOK, "paid")
	waitResult(t, c, "stripe", alice, "paid")
	eventually(t, "reconcile", func() (bool, string) { return s.ReconcileOK(t) })
	_, body := s.AdminCall(t, http.MethodGet, "/seckill/reconcile", "")
	if !strings.Contains(string(body), `"charges":1`) {
		t.Errorf("reconcile: %s", body)
	}
}
