package stripepay

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/stripe/stripe-go/v82"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
	"github.com/caddy-seckill/caddy-seckill/money"
	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

// testKey is a test-mode key in Stripe's format; stripe-mock checks the format only.
const testKey = "sk_test_seckill"

var usd = money.Price{Amount: 19900, Currency: "USD"}

// call is one request the provider sent to Stripe.
type call struct{ method, path, idempotencyKey, form string }

// recorder forwards to a stripe-mock and records each request, so a test sees what reached
// Stripe (stripe-mock itself keeps nothing).
type recorder struct {
	mu    sync.Mutex
	calls []call
}

func record(t *testing.T, target string) (*recorder, string) {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	proxy := httputil.NewSingleHostReverseProxy(u)
	// A transport of its own: a shared one may hold an idle connection to an earlier test's
	// stripe-mock on the same port, and a POST written into that dead connection is not retried
	// (the proxy's body cannot be rewound), so the charge would meet a 502.
	tr := &http.Transport{}
	proxy.Transport = tr
	t.Cleanup(tr.CloseIdleConnections)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		form := r.URL.RawQuery
		if len(body) > 0 {
			form = string(body)
		}
		rec.mu.Lock()
		rec.calls = append(rec.calls, call{r.Method, r.URL.Path, r.Header.Get("Idempotency-Key"), form})
		rec.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return rec, srv.URL
}

// take returns the calls recorded since the last take.
func (r *recorder) take() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls
	r.calls = nil
	return c
}

func charge(p *Provider, key string, price money.Price) (orderbackend.ChargeResult, error) {
	return p.Charge(context.Background(), orderbackend.ChargeRequest{
		Key: key, Order: orderbackend.Order{ID: "o1", Title: "Phone"}, Amount: price, PaymentMethod: "pm_card_visa",
	})
}

// TestChargeSucceeded: a PaymentIntent stripe-mock answers succeeded pays, under the same key on a
// retry; the amount Stripe received (stripe-mock reflects it) is the converted one.
func TestChargeSucceeded(t *testing.T) {
	sm := testsrv.StartStripeMock(t, testsrv.WithStripeFixture("payment_intent", map[string]any{"status": "succeeded"}))
	rec, base := record(t, sm.URL)
	p := New(testKey, base, nil)
	for _, c := range []struct {
		price  money.Price
		amount string // what Stripe is asked for
		code   string
	}{
		{usd, "amount=19900&", "currency=usd&"},
		{money.Price{Amount: 1999, Currency: "JPY"}, "amount=1999&", "currency=jpy&"},
		{money.Price{Amount: 5, Currency: "ISK"}, "amount=500&", "currency=isk&"},
	} {
		var first orderbackend.ChargeResult
		for i := range 2 { // the retry of an unanswered call: the same key
			r, err := charge(p, "o1-1", c.price)
			if err != nil || r.Outcome != orderbackend.ChargeSucceeded || !strings.HasPrefix(r.Ref, "pi_") {
				t.Fatalf("charge %s #%d = %+v, %v", c.price, i, r, err)
			}
			first = r
		}
		if err := p.Refund(context.Background(), "o1-1", first.Ref, c.price); err != nil {
			t.Errorf("refund %s: %v", c.price, err)
		}
		calls := rec.take()
		if len(calls) != 3 {
			t.Fatalf("%s: calls %+v; want create, create, refund", c.price, calls)
		}
		for _, cl := range calls[:2] {
			if cl.method != http.MethodPost || cl.path != "/v1/payment_intents" || cl.idempotencyKey != "o1-1" ||
				!strings.Contains(cl.form, c.amount) || !strings.Contains(cl.form, c.code) || !strings.Contains(cl.form, "confirm=true") ||
				!strings.Contains(cl.form, "payment_method=pm_card_visa") || !strings.Contains(cl.form, "metadata[seckill_key]=o1-1") {
				t.Errorf("%s: create call %+v", c.price, cl)
			}
		}
		if cl := calls[2]; cl.path != "/v1/refunds" || cl.idempotencyKey != "refund-o1-1" ||
			!strings.Contains(cl.form, "payment_intent="+first.Ref) || !strings.Contains(cl.form+"&", c.amount) {
			t.Errorf("%s: refund call %+v", c.price, cl)
		}
	}
}

// TestChargeInexact: a price Stripe cannot take exactly is an error before any call.
func TestChargeInexact(t *testing.T) {
	p := New(testKey, "http://127.0.0.1:1", nil) // never reached
	if r, err := charge(p, "o1-1", money.Price{Amount: 1234, Currency: "KWD"}); !errors.Is(err, ErrInexactAmount) {
		t.Fatalf("charge 1.234 KWD = %+v, %v; want ErrInexactAmount", r, err)
	}
}

// TestChargeNeedsAction: requires_action (3-D Secure) and Stripe's bundled answer
// requires_payment_method are declines, each after cancelling the PaymentIntent; processing is
// pending.
func TestChargeNeedsAction(t *testing.T) {
	for status, want := range map[string]orderbackend.ChargeOutcome{
		"requires_action":         orderbackend.ChargeFailed,
		"requires_payment_method": orderbackend.ChargeFailed,
		"canceled":                orderbackend.ChargeFailed,
		"processing":              orderbackend.ChargePending,
	} {
		t.Run(status, func(t *testing.T) {
			sm := testsrv.StartStripeMock(t, testsrv.WithStripeFixture("payment_intent", map[string]any{"status": status}))
			rec, base := record(t, sm.URL)
			r, err := charge(New(testKey, base, nil), "o1-1", usd)
			if err != nil || r.Outcome != want {
				t.Fatalf("charge = %+v, %v; want %s", r, err, want)
			}
			calls := rec.take()
			cancels := status == "requires_action" || status == "requires_payment_method"
			if cancels && (len(calls) != 2 || !strings.HasSuffix(calls[1].path, "/cancel") || calls[1].idempotencyKey != "cancel-o1-1") {
				t.Errorf("calls %+v; want create, cancel under cancel-o1-1", calls)
			}
			if !cancels && len(calls) != 1 {
				t.Errorf("calls %+v; want create", calls)
			}
		})
	}
}

// TestLookup: the PaymentIntent whose metadata holds the key is found (stripe-mock's search
// answers its fixture, here one made under o1-1); another key finds nothing.
func TestLookup(t *testing.T) {
	sm := testsrv.StartStripeMock(t, testsrv.WithStripeFixture("payment_intent", map[string]any{
		"status": "succeeded", "metadata": map[string]string{MetadataKey: "o1-1"},
	}))
	rec, base := record(t, sm.URL)
	p := New(testKey, base, nil)
	ctx := context.Background()
	if r, err := p.Lookup(ctx, "o1-1"); err != nil || r.Outcome != orderbackend.ChargeSucceeded || !strings.HasPrefix(r.Ref, "pi_") {
		t.Fatalf("lookup o1-1 = %+v, %v", r, err)
	}
	if calls := rec.take(); len(calls) == 0 || calls[0].path != "/v1/payment_intents/search" ||
		!strings.Contains(calls[0].form, url.QueryEscape("metadata['seckill_key']:'o1-1'")) {
		t.Errorf("lookup calls %+v", calls)
	}
	if r, err := p.Lookup(ctx, "o2-1"); err != nil || r.Outcome != orderbackend.ChargeFailed {
		t.Fatalf("lookup o2-1 = %+v, %v", r, err)
	}
	if _, err := p.Lookup(ctx, "o1-1' OR status:'succeeded"); err == nil {
		t.Fatal("a key with quotes was searched")
	}
}

// TestUnreachable: a Stripe that does not answer leaves the outcome unknown (an error), never a
// decline, and a refund fails so that the sweeper tries again.
func TestUnreachable(t *testing.T) {
	sm := testsrv.StartStripeMock(t)
	url := sm.URL
	sm.Stop()
	p := New(testKey, url, nil)
	if r, err := charge(p, "o1-1", usd); err == nil {
		t.Fatalf("charge against a stopped Stripe = %+v", r)
	}
	if r, err := p.Lookup(context.Background(), "o1-1"); err == nil {
		t.Fatalf("lookup against a stopped Stripe = %+v", r)
	}
	if err := p.Refund(context.Background(), "o1-1", "pi_1", usd); err == nil {
		t.Fatal("refund against a stopped Stripe succeeded")
	}
}

// TestDeclined: which of Stripe's errors end an attempt (nothing taken under its key for good).
func TestDeclined(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&stripe.Error{Type: stripe.ErrorTypeCard, HTTPStatusCode: http.StatusPaymentRequired}, true},
		{&stripe.Error{Type: stripe.ErrorTypeInvalidRequest, HTTPStatusCode: http.StatusBadRequest}, true},
		{&stripe.Error{Type: stripe.ErrorTypeIdempotency, HTTPStatusCode: http.StatusBadRequest}, false},
		{&stripe.Error{Type: stripe.ErrorTypeInvalidRequest, HTTPStatusCode: http.StatusUnauthorized}, false},
		{&stripe.Error{Type: stripe.ErrorTypeAPI, HTTPStatusCode: http.StatusInternalServerError}, false},
		{context.DeadlineExceeded, false},
	} {
		if got := declined(c.err); got != c.want {
			t.Errorf("declined(%v) = %v; want %v", c.err, got, c.want)
		}
	}
}
