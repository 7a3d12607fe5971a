// Package webhookpay is the order backend's payment provider for payment services that confirm
// later, by a signed HTTP notification (the way Alipay's and WeChat Pay's notify URLs work): the
// shop runs a small service at its url that talks to the real payment service. Charge, Lookup and
// Refund are signed JSON POSTs to that url, answered with signed JSON; a charge is normally
// answered pending with the page where the buyer pays (next_url), and the outcome arrives later
// as a signed notification at the order API's POST {orders prefix}/webhooks/webhook
// (ParseNotification). Every message carries the header Seckill-Signature: t=<unix
// seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")> (Sign, Verify). The Caddy guest module
// seckill.payments.webhook (module.go) configures it; README.md is the shop's side.
package webhookpay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/money"
	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

// ProviderName is the provider's name in the notification path (POST {orders
// prefix}/webhooks/webhook) and in payment_events.
const ProviderName = "webhook"

// maxAnswer bounds the shop's answers.
const maxAnswer = 64 << 10

// Provider is the webhook payment provider.
type Provider struct {
	url       string
	secret    []byte
	tolerance time.Duration
	client    *http.Client
	now       func() time.Time
	log       *zap.Logger
}

var (
	_ orderbackend.Payments = (*Provider)(nil)
	_ orderbackend.Notifier = (*Provider)(nil)
)

// New returns a Provider that calls the shop's service at serviceURL and signs and verifies with
// secret; tolerance 0 is DefaultTolerance, a nil client one with a 20 s timeout.
func New(serviceURL string, secret []byte, tolerance time.Duration, client *http.Client, log *zap.Logger) *Provider {
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	if client == nil {
		client = &http.Client{Timeout: 20 * time.Second}
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Provider{url: serviceURL, secret: secret, tolerance: tolerance, client: client, now: time.Now, log: log}
}

// Request is what the provider POSTs to the shop's service: Type "charge" (Key, OrderID,
// Activity, Amount, Currency, Title, PaymentMethod), "lookup" (Key) or "refund" (Key, Ref,
// Amount, Currency). Amounts are in the currency's minor units. The service must answer every
// type idempotently per Key: a repeated charge is the same charge.
type Request struct {
	Type          string `json:"type"`
	Key           string `json:"key"`
	OrderID       string `json:"order_id,omitempty"`
	Activity      string `json:"activity,omitempty"`
	Amount        int64  `json:"amount,omitempty"`
	Currency      string `json:"currency,omitempty"`
	Title         string `json:"title,omitempty"`
	PaymentMethod string `json:"payment_method,omitempty"`
	Ref           string `json:"ref,omitempty"`
}

// Answer is the shop's service's signed 200 answer: Outcome "succeeded", "failed" or "pending"
// (charge, lookup; lookup answers "failed" when nothing was charged under the key) or "refunded"
// (refund); Ref is its id of the charge; NextURL, for a pending charge, the page where the buyer
// pays.
type Answer struct {
	Outcome string `json:"outcome"`
	Ref     string `json:"ref,omitempty"`
	NextURL string `json:"next_url,omitempty"`
}

// Event is a notification the shop's service POSTs to {orders prefix}/webhooks/webhook, signed:
// ID is unique per event (a redelivery keeps it), Key the attempt's key from the charge request,
// Outcome "succeeded", "failed" or "pending".
type Event struct {
	ID      string `json:"id"`
	Key     string `json:"key"`
	Outcome string `json:"outcome"`
	Ref     string `json:"ref,omitempty"`
}

// Charge implements orderbackend.Payments: a signed "charge" request. A pending answer carries
// the buyer's next_url.
func (p *Provider) Charge(ctx context.Context, c orderbackend.ChargeRequest) (orderbackend.ChargeResult, error) {
	a, err := p.call(ctx, Request{Type: "charge", Key: c.Key, OrderID: c.Order.ID, Activity: c.Order.Activity,
		Amount: c.Amount.Amount, Currency: c.Amount.Currency, Title: c.Order.Title, PaymentMethod: c.PaymentMethod})
	if err != nil {
		return orderbackend.ChargeResult{}, err
	}
	res, err := result(a)
	if err != nil {
		return orderbackend.ChargeResult{}, fmt.Errorf("webhook payments: charge %s: %w", c.Key, err)
	}
	if res.Outcome == orderbackend.ChargePending && a.NextURL != "" {
		if err := checkNextURL(a.NextURL); err != nil {
			return orderbackend.ChargeResult{}, fmt.Errorf("webhook payments: charge %s: %w", c.Key, err)
		}
		res.NextURL = a.NextURL
	}
	return res, nil
}

// Lookup implements orderbackend.Payments: a signed "lookup" request.
func (p *Provider) Lookup(ctx context.Context, key string) (orderbackend.ChargeResult, error) {
	a, err := p.call(ctx, Request{Type: "lookup", Key: key})
	if err != nil {
		return orderbackend.ChargeResult{}, err
	}
	res, err := result(a)
	if err != nil {
		return orderbackend.ChargeResult{}, fmt.Errorf("webhook payments: lookup %s: %w", key, err)
	}
	return res, nil
}

// Refund implements orderbackend.Payments: a signed "refund" request, done when answered
// "refunded".
func (p *Provider) Refund(ctx context.Context, key, ref string, amount money.Price) error {
	a, err := p.call(ctx, Request{Type: "refund", Key: key, Ref: ref, Amount: amount.Amount, Currency: amount.Currency})
	if err != nil {
		return err
	}
	if a.Outcome != "refunded" {
		return fmt.Errorf("webhook payments: refund %s: the service answered %q, want refunded", key, a.Outcome)
	}
	return nil
}

// result maps a charge or lookup answer.
func result(a Answer) (orderbackend.ChargeResult, error) {
	switch o := orderbackend.ChargeOutcome(a.Outcome); o {
	case orderbackend.ChargeSucceeded, orderbackend.ChargeFailed, orderbackend.ChargePending:
		return orderbackend.ChargeResult{Outcome: o, Ref: a.Ref}, nil
	}
	return orderbackend.ChargeResult{}, fmt.Errorf("outcome %q: want succeeded, failed or pending", a.Outcome)
}

// checkNextURL accepts an absolute http(s) URL, which the buyer's page opens.
func checkNextURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || len(s) > 2048 {
		return fmt.Errorf("next_url %q is not an absolute http(s) URL", s)
	}
	return nil
}

// call POSTs a signed request to the shop's service and returns its verified answer. Any failure
// (no answer, a status other than 200, a bad signature) leaves the outcome unknown: the order
// backend keeps the attempt open and the sweeper asks again.
func (p *Provider) call(ctx context.Context, r Request) (Answer, error) {
	body, err := json.Marshal(r)
	if err != nil {
		return Answer{}, fmt.Errorf("webhook payments: %s %s: %w", r.Type, r.Key, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return Answer{}, fmt.Errorf("webhook payments: %s %s: %w", r.Type, r.Key, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(SignatureHeader, Sign(p.secret, p.now(), body))
	resp, err := p.client.Do(req)
	if err != nil {
		return Answer{}, fmt.Errorf("webhook payments: %s %s: %w", r.Type, r.Key, err)
	}
	defer func() { _ = resp.Body.Close() }()
	ab, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	switch {
	case err != nil:
		return Answer{}, fmt.Errorf("webhook payments: %s %s: read the answer: %w", r.Type, r.Key, err)
	case len(ab) > maxAnswer:
		return Answer{}, fmt.Errorf("webhook payments: %s %s: the answer is over %d bytes", r.Type, r.Key, maxAnswer)
	case resp.StatusCode != http.StatusOK:
		return Answer{}, fmt.Errorf("webhook payments: %s %s: the service answered %s", r.Type, r.Key, resp.Status)
	}
	if err := Verify(p.secret, resp.Header.Get(SignatureHeader), ab, p.now(), p.tolerance); err != nil {
		return Answer{}, fmt.Errorf("webhook payments: %s %s: the answer: %w", r.Type, r.Key, err)
	}
	var a Answer
	if err := json.Unmarshal(ab, &a); err != nil {
		return Answer{}, fmt.Errorf("webhook payments: %s %s: the answer is not JSON: %w", r.Type, r.Key, err)
	}
	return a, nil
}

// NotifyProvider implements orderbackend.Notifier.
func (*Provider) NotifyProvider() string { return ProviderName }

// ParseNotification implements orderbackend.Notifier: the Seckill-Signature must verify within
// the tolerance of now, and the body be an Event with no other fields.
func (p *Provider) ParseNotification(h http.Header, body []byte, now time.Time) (orderbackend.Notification, error) {
	if err := Verify(p.secret, h.Get(SignatureHeader), body, now, p.tolerance); err != nil {
		return orderbackend.Notification{}, fmt.Errorf("%w: %w", orderbackend.ErrBadSignature, err)
	}
	var ev Event
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ev); err != nil {
		return orderbackend.Notification{}, fmt.Errorf("%w: want {\"id\",\"key\",\"outcome\",\"ref\"}: %w",
			orderbackend.ErrBadNotification, err)
	}
	if dec.More() {
		return orderbackend.Notification{}, fmt.Errorf("%w: more than one JSON value", orderbackend.ErrBadNotification)
	}
	// NotifyPayment checks the fields (ids present, a known outcome).
	return orderbackend.Notification{Provider: ProviderName, EventID: ev.ID, Key: ev.Key,
		Outcome: orderbackend.ChargeOutcome(ev.Outcome), Ref: ev.Ref}, nil
}
