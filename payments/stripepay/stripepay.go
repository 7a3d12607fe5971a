// Package stripepay charges buyers through Stripe: a PaymentIntent created and confirmed at once
// with the PaymentMethod the buyer's pay call names, every call under the order backend's
// idempotency key. Lookup finds the PaymentIntent by that key (kept in its metadata) with
// Stripe's search; Refund gives back the whole PaymentIntent. The Caddy guest module
// seckill.payments.stripe (module.go) configures it.
package stripepay

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v82"
	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/money"
	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

// DefaultAPIBase is Stripe's API.
const DefaultAPIBase = "https://api.stripe.com"

// MetadataKey is the PaymentIntent metadata field that holds the attempt's idempotency key;
// Lookup searches for it.
const MetadataKey = "seckill_key"

// Provider is the Stripe payment provider.
type Provider struct {
	client *stripe.Client
	log    *zap.Logger

	webhookSecret    string        // the webhook endpoint's signing secret (whsec_…); "" takes no notifications
	webhookTolerance time.Duration // how old a notification's signature may be
}

var (
	_ orderbackend.Payments              = (*Provider)(nil)
	_ orderbackend.PaymentMethodRequirer = (*Provider)(nil)
)

// Option configures a Provider.
type Option func(*Provider)

// WithWebhook makes the Provider take Stripe's webhooks (ParseNotification) signed with secret,
// the endpoint's signing secret (whsec_…), refusing signatures older than tolerance
// (DefaultWebhookTolerance when 0).
func WithWebhook(secret string, tolerance time.Duration) Option {
	return func(p *Provider) {
		if tolerance <= 0 {
			tolerance = DefaultWebhookTolerance
		}
		p.webhookSecret, p.webhookTolerance = secret, tolerance
	}
}

// New returns a Provider calling the Stripe API at apiBase ("" for DefaultAPIBase) with the
// secret key.
func New(secretKey, apiBase string, log *zap.Logger, opts ...Option) *Provider {
	if apiBase == "" {
		apiBase = DefaultAPIBase
	}
	if log == nil {
		log = zap.NewNop()
	}
	// One network retry, under the same idempotency key; the order API bounds the whole call.
	retries := int64(1)
	backends := stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		URL:               stripe.String(strings.TrimSuffix(apiBase, "/")),
		HTTPClient:        &http.Client{Timeout: 80 * time.Second},
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
		MaxNetworkRetries: &retries,
	})
	p := &Provider{client: stripe.NewClient(secretKey, stripe.WithBackends(backends)), log: log,
		webhookTolerance: DefaultWebhookTolerance}
	for _, o := range opts {
		o(p)
	}
	return p
}

// RequiresPaymentMethod implements orderbackend.PaymentMethodRequirer: a PaymentIntent is
// confirmed with the buyer's PaymentMethod.
func (*Provider) RequiresPaymentMethod() bool { return true }

// Charge implements orderbackend.Payments: it creates and confirms a PaymentIntent under c.Key.
// Succeeded is paid; processing is ChargePending; a decline (card_error), a request Stripe
// refuses (an unknown PaymentMethod, an amount below Stripe's minimum) and a PaymentIntent that
// needs the buyer's action (3-D Secure, which this flow cannot hand to the buyer) are
// ChargeFailed, the last after cancelling the PaymentIntent so it can never take money.
func (p *Provider) Charge(ctx context.Context, c orderbackend.ChargeRequest) (orderbackend.ChargeResult, error) {
	amount, currency, err := Amount(c.Amount)
	if err != nil {
		return orderbackend.ChargeResult{}, fmt.Errorf("stripe: charge %s: %w", c.Key, err)
	}
	if c.PaymentMethod == "" {
		return orderbackend.ChargeResult{}, fmt.Errorf("stripe: charge %s: no payment method", c.Key)
	}
	params := &stripe.PaymentIntentCreateParams{
		Amount:        stripe.Int64(amount),
		Currency:      stripe.String(currency),
		PaymentMethod: stripe.String(c.PaymentMethod),
		Confirm:       stripe.Bool(true),
		// No return_url to come back to: redirect-based methods are not offered.
		AutomaticPaymentMethods: &stripe.PaymentIntentCreateAutomaticPaymentMethodsParams{
			Enabled: stripe.Bool(true), AllowRedirects: stripe.String("never"),
		},
	}
	if c.Order.Title != "" {
		params.Description = stripe.String(c.Order.Title)
	}
	params.AddMetadata(MetadataKey, c.Key)
	params.AddMetadata("seckill_order", c.Order.ID)
	params.SetIdempotencyKey(c.Key)
	pi, err := p.client.V1PaymentIntents.Create(ctx, params)
	if err != nil {
		if declined(err) {
			p.log.Info("stripe declined a charge", zap.String("payment", c.Key), zap.Error(err))
			return orderbackend.ChargeResult{Outcome: orderbackend.ChargeFailed}, nil
		}
		return orderbackend.ChargeResult{}, fmt.Errorf("stripe: charge %s: %w", c.Key, err)
	}
	if pi.Amount != amount || pi.Currency != stripe.Currency(currency) {
		// Not the charge asked for: never take it for this order's price.
		return orderbackend.ChargeResult{}, fmt.Errorf("stripe: charge %s: payment intent %s is %d %s, not %d %s",
			c.Key, pi.ID, pi.Amount, pi.Currency, amount, currency)
	}
	return p.outcome(ctx, c.Key, pi)
}

// declined reports whether Stripe refused to take money for good: a card decline or a request it
// rejects (its answer stays the same under this key). Other errors leave the outcome unknown.
func declined(err error) bool {
	var se *stripe.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Type {
	case stripe.ErrorTypeCard:
		return true
	case stripe.ErrorTypeInvalidRequest:
		return se.HTTPStatusCode == http.StatusBadRequest || se.HTTPStatusCode == http.StatusNotFound ||
			se.HTTPStatusCode == http.StatusPaymentRequired
	}
	return false
}

// outcome maps a PaymentIntent's status; one still waiting for the buyer is cancelled first.
func (p *Provider) outcome(ctx context.Context, key string, pi *stripe.PaymentIntent) (orderbackend.ChargeResult, error) {
	switch pi.Status {
	case stripe.PaymentIntentStatusSucceeded:
		return orderbackend.ChargeResult{Outcome: orderbackend.ChargeSucceeded, Ref: pi.ID}, nil
	case stripe.PaymentIntentStatusProcessing:
		return orderbackend.ChargeResult{Outcome: orderbackend.ChargePending, Ref: pi.ID}, nil
	case stripe.PaymentIntentStatusCanceled:
		return orderbackend.ChargeResult{Outcome: orderbackend.ChargeFailed, Ref: pi.ID}, nil
	case stripe.PaymentIntentStatusRequiresAction, stripe.PaymentIntentStatusRequiresPaymentMethod,
		stripe.PaymentIntentStatusRequiresConfirmation:
		// The buyer could still complete it (3-D Secure) and pay an attempt ended failed:
		// cancelled, it never can.
		cp := &stripe.PaymentIntentCancelParams{}
		cp.SetIdempotencyKey("cancel-" + key)
		if _, err := p.client.V1PaymentIntents.Cancel(ctx, pi.ID, cp); err != nil {
			return orderbackend.ChargeResult{}, fmt.Errorf("stripe: cancel payment intent %s of %s (%s): %w", pi.ID, key, pi.Status, err)
		}
		p.log.Info("stripe payment intent needed the buyer's action; cancelled as declined",
			zap.String("payment", key), zap.String("payment_intent", pi.ID), zap.String("status", string(pi.Status)))
		return orderbackend.ChargeResult{Outcome: orderbackend.ChargeFailed, Ref: pi.ID}, nil
	}
	return orderbackend.ChargeResult{}, fmt.Errorf("stripe: payment intent %s of %s: unexpected status %q", pi.ID, key, pi.Status)
}

// Lookup implements orderbackend.Payments: it searches the PaymentIntents whose metadata holds
// key. Stripe's search is eventually consistent (under a minute normally, per Stripe); the
// sweeper asks a minute after the attempt started.
func (p *Provider) Lookup(ctx context.Context, key string) (orderbackend.ChargeResult, error) {
	if !searchable(key) {
		return orderbackend.ChargeResult{}, fmt.Errorf("stripe: lookup %q: not a payment key", key)
	}
	params := &stripe.PaymentIntentSearchParams{}
	params.Query = fmt.Sprintf("metadata['%s']:'%s'", MetadataKey, key)
	params.Context = ctx
	var found []*stripe.PaymentIntent
	for pi, err := range p.client.V1PaymentIntents.Search(ctx, params) {
		if err != nil {
			return orderbackend.ChargeResult{}, fmt.Errorf("stripe: lookup %s: %w", key, err)
		}
		if pi.Metadata[MetadataKey] == key {
			found = append(found, pi)
		}
	}
	// One key makes one PaymentIntent; should there be more, a success wins.
	var open *stripe.PaymentIntent
	for _, pi := range found {
		switch pi.Status {
		case stripe.PaymentIntentStatusSucceeded:
			return orderbackend.ChargeResult{Outcome: orderbackend.ChargeSucceeded, Ref: pi.ID}, nil
		case stripe.PaymentIntentStatusCanceled:
		default:
			open = pi
		}
	}
	if open != nil {
		return p.outcome(ctx, key, open)
	}
	return orderbackend.ChargeResult{Outcome: orderbackend.ChargeFailed}, nil
}

// searchable accepts the order backend's keys (order id, "-", attempt), which need no quoting in
// a search query.
func searchable(key string) bool {
	if key == "" || len(key) > 255 {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// Refund implements orderbackend.Payments: a refund of the whole PaymentIntent ref under the
// idempotency key "refund-" + key (Stripe ties a key to one endpoint). A PaymentIntent already
// refunded counts as done.
func (p *Provider) Refund(ctx context.Context, key, ref string, amount money.Price) error {
	if ref == "" {
		return fmt.Errorf("stripe: refund %s: no payment intent", key)
	}
	n, _, err := Amount(amount)
	if err != nil {
		return fmt.Errorf("stripe: refund %s: %w", key, err)
	}
	params := &stripe.RefundCreateParams{PaymentIntent: stripe.String(ref), Amount: stripe.Int64(n)}
	params.AddMetadata(MetadataKey, key)
	params.SetIdempotencyKey("refund-" + key)
	if _, err := p.client.V1Refunds.Create(ctx, params); err != nil {
		var se *stripe.Error
		if errors.As(err, &se) && se.Code == stripe.ErrorCodeChargeAlreadyRefunded {
			return nil
		}
		return fmt.Errorf("stripe: refund %s (%s, %s): %w", key, ref, amount, err)
	}
	return nil
}
