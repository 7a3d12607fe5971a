package stripepay

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

const testWhsec = "whsec_test_seckill"

// stripeEvent is a webhook body as Stripe sends it: an Event whose data.object is a PaymentIntent.
func stripeEvent(t *testing.T, id, typ string, metadata map[string]string) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"id": id, "object": "event", "type": typ, "api_version": "2020-08-27", "created": time.Now().Unix(),
		"livemode": false, "pending_webhooks": 1,
		"data": map[string]any{"object": map[string]any{
			"id": "pi_" + id, "object": "payment_intent", "amount": 19900, "currency": "usd",
			"status": "succeeded", "metadata": metadata,
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// signed is the Stripe-Signature header Stripe would send for body at ts (stripe-go's own test helper).
func signed(body []byte, secret string, ts time.Time) http.Header {
	p := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: ts})
	return http.Header{"Stripe-Signature": {p.Header}}
}

// TestParseNotification: Stripe's signed PaymentIntent events map to the attempt in their
// metadata; foreign event types and PaymentIntents of other integrations are ignored; a bad,
// missing or old signature, or a provider without a webhook secret, is refused.
func TestParseNotification(t *testing.T) {
	p := New(testKey, "http://127.0.0.1:1", nil, WithWebhook(testWhsec, 0))
	now := time.Now()
	ours := map[string]string{MetadataKey: "o1-2", "seckill_order": "o1"}
	for typ, want := range map[string]orderbackend.ChargeOutcome{
		"payment_intent.succeeded":      orderbackend.ChargeSucceeded,
		"payment_intent.payment_failed": orderbackend.ChargeFailed,
		"payment_intent.canceled":       orderbackend.ChargeFailed,
	} {
		body := stripeEvent(t, "evt_1", typ, ours)
		n, err := p.ParseNotification(signed(body, testWhsec, now), body, now)
		if err != nil || n != (orderbackend.Notification{Provider: "stripe", EventID: "evt_1", Key: "o1-2", Outcome: want, Ref: "pi_evt_1"}) {
			t.Errorf("%s = %+v, %v", typ, n, err)
		}
	}
	for name, c := range map[string]struct {
		body []byte
		h    http.Header
		want error
	}{
		"foreign type":       {stripeEvent(t, "evt_2", "customer.created", ours), nil, orderbackend.ErrIgnoredNotification},
		"processing":         {stripeEvent(t, "evt_3", "payment_intent.processing", ours), nil, orderbackend.ErrIgnoredNotification},
		"another's intent":   {stripeEvent(t, "evt_4", "payment_intent.succeeded", map[string]string{"shop": "x"}), nil, orderbackend.ErrIgnoredNotification},
		"bad key":            {stripeEvent(t, "evt_5", "payment_intent.succeeded", map[string]string{MetadataKey: "o1 2'"}), nil, orderbackend.ErrBadNotification},
		"not json":           {[]byte("{"), nil, orderbackend.ErrBadNotification},
		"other secret":       {stripeEvent(t, "evt_6", "payment_intent.succeeded", ours), signed(stripeEvent(t, "evt_6", "payment_intent.succeeded", ours), "whsec_other", now), orderbackend.ErrBadSignature},
		"old":                {stripeEvent(t, "evt_7", "payment_intent.succeeded", ours), signed(stripeEvent(t, "evt_7", "payment_intent.succeeded", ours), testWhsec, now.Add(-6*time.Minute)), orderbackend.ErrBadSignature},
		"unsigned":           {stripeEvent(t, "evt_8", "payment_intent.succeeded", ours), http.Header{}, orderbackend.ErrBadSignature},
		"garbled header":     {stripeEvent(t, "evt_9", "payment_intent.succeeded", ours), http.Header{"Stripe-Signature": {"t=x,v1"}}, orderbackend.ErrBadSignature},
		"body changed after": {stripeEvent(t, "evt_10", "payment_intent.succeeded", ours), signed(stripeEvent(t, "evt_10", "payment_intent.payment_failed", ours), testWhsec, now), orderbackend.ErrBadSignature},
	} {
		h := c.h
		if h == nil {
			h = signed(c.body, testWhsec, now)
		}
		if n, err := p.ParseNotification(h, c.body, now); !errors.Is(err, c.want) {
			t.Errorf("%s = %+v, %v; want %v", name, n, err, c.want)
		}
	}
	// A tolerance of its own: 10 minutes takes the 6-minute-old signature.
	body := stripeEvent(t, "evt_7", "payment_intent.succeeded", ours)
	long := New(testKey, "", nil, WithWebhook(testWhsec, 10*time.Minute))
	if _, err := long.ParseNotification(signed(body, testWhsec, now.Add(-6*time.Minute)), body, now); err != nil {
		t.Errorf("within a 10m tolerance: %v", err)
	}
	// Without a webhook secret nothing is taken.
	if _, err := New(testKey, "", nil).ParseNotification(signed(body, "", now), body, now); !errors.Is(err, orderbackend.ErrBadSignature) {
		t.Errorf("no webhook secret: %v, want ErrBadSignature", err)
	}
}
