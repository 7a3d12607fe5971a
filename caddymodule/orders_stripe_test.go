package caddymodule_test

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stripe/stripe-go/v82/webhook"

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

// TestOrdersStripeWebhook: a PaymentIntent Stripe answers processing leaves the pay call 202
// payment_pending; Stripe's signed payment_intent.succeeded event, posted to
// /orders/webhooks/stripe without a token, pays the order; a replay is 200 duplicate, and an
// unsigned, wrongly signed or foreign event changes nothing.
func TestOrdersStripeWebhook(t *testing.T) {
	sm := testsrv.StartStripeMock(t, testsrv.WithStripeFixture("payment_intent", map[string]any{"status": "processing"}))
	db := filepath.Join(t.TempDir(), "orders.db")
	orders := "orders sqlite " + db + " {\n\tsweep_every 200ms\n\tconsumer_name test-node\n" +
		"\tpayments stripe {\n\t\tsecret_key sk_test_seckill\n\t\tapi_base " + sm.URL + "\n\t\twebhook_secret whsec_seckill\n\t}\n}\n"
	activity := strings.Replace(saleBlock("stripewh", 1), "\tlimit 1\n", "\tlimit 1\n\tprice 1999 JPY\n", 1)
	s := startSale(t, jwtBlock+"captcha off\n"+orders+activity)
	c := s.Client

	alice := token(t, "alice")
	expect(t, "alice buys", c.Post(buyPath(t, c, "stripewh", alice), alice, ""), http.StatusAccepted, "queued")
	order := waitResult(t, c, "stripewh", alice, "pending_payment").Str("order_id")
	expect(t, "alice pays", c.Post("/orders/"+order+"/pay", alice, `{"payment_method":"pm_card_visa"}`),
		http.StatusAccepted, "payment_pending")

	event := func(id, typ string) string {
		b, _ := json.Marshal(map[string]any{"id": id, "object": "event", "type": typ, "api_version": "2020-08-27",
			"data": map[string]any{"object": map[string]any{"id": "pi_1", "object": "payment_intent", "status": "succeeded",
				"metadata": map[string]string{"seckill_key": order + "-1", "seckill_order": order}}}})
		return string(b)
	}
	sign := func(body, secret string) string {
		return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: []byte(body), Secret: secret}).Header
	}
	const hook = "/orders/webhooks/stripe"
	ok := event("evt_1", "payment_intent.succeeded")
	expect(t, "unsigned", c.Post(hook, "", ok), http.StatusBadRequest, "bad_signature")
	expect(t, "another secret", c.Post(hook, "", ok, "Stripe-Signature", sign(ok, "whsec_other")), http.StatusBadRequest, "bad_signature")
	foreign := event("evt_2", "charge.dispute.created")
	expect(t, "foreign type", c.Post(hook, "", foreign, "Stripe-Signature", sign(foreign, "whsec_seckill")), http.StatusOK, "ignored")
	expect(t, "other provider", c.Post("/orders/webhooks/paypal", "", ok, "Stripe-Signature", sign(ok, "whsec_seckill")),
		http.StatusNotFound, "not_found")
	expect(t, "still pending", c.Get("/orders/"+order, alice), http.StatusOK, "pending_payment")

	expect(t, "succeeded", c.Post(hook, "", ok, "Stripe-Signature", sign(ok, "whsec_seckill")), http.StatusOK, "stored")
	expect(t, "replayed", c.Post(hook, "", ok, "Stripe-Signature", sign(ok, "whsec_seckill")), http.StatusOK, "duplicate")
	failed := event("evt_3", "payment_intent.payment_failed")
	expect(t, "a failure after the success", c.Post(hook, "", failed, "Stripe-Signature", sign(failed, "whsec_seckill")), http.StatusOK, "stored")
	expect(t, "paid", c.Get("/orders/"+order, alice), http.StatusOK, "paid")
	waitResult(t, c, "stripewh", alice, "paid")
	eventually(t, "reconcile", func() (bool, string) { return s.ReconcileOK(t) })
}
