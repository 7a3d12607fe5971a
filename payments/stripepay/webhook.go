package stripepay

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

// DefaultWebhookTolerance is how old a webhook's signature may be: Stripe's own default.
const DefaultWebhookTolerance = webhook.DefaultTolerance

// ProviderName is the provider's name in the order API's notification path
// (POST {orders prefix}/webhooks/stripe) and in the payment_events table.
const ProviderName = "stripe"

var _ orderbackend.Notifier = (*Provider)(nil)

// NotifyProvider implements orderbackend.Notifier.
func (*Provider) NotifyProvider() string { return ProviderName }

// ParseNotification implements orderbackend.Notifier: it verifies the Stripe-Signature header
// with the webhook endpoint's signing secret (stripe-go's webhook.ConstructEventWithOptions:
// HMAC-SHA256 of "t.body", a timestamp older than the tolerance is refused) and reads a
// PaymentIntent event this provider made (its metadata holds the attempt's key):
// payment_intent.succeeded is a success, payment_intent.payment_failed and
// payment_intent.canceled a failure. Every other event type, and a PaymentIntent without the
// key (made by something else on the same Stripe account), is ErrIgnoredNotification, answered
// 200 so that Stripe does not deliver it again for days. The tolerance is checked against this
// machine's clock (stripe-go's), not now.
func (p *Provider) ParseNotification(h http.Header, body []byte, _ time.Time) (orderbackend.Notification, error) {
	if p.webhookSecret == "" {
		return orderbackend.Notification{}, fmt.Errorf("%w: stripe: no webhook_secret is configured", orderbackend.ErrBadSignature)
	}
	ev, err := webhook.ConstructEventWithOptions(body, h.Get("Stripe-Signature"), p.webhookSecret, webhook.ConstructEventOptions{
		Tolerance: p.webhookTolerance,
		// Only the event's id, type and the PaymentIntent's id, status and metadata are read,
		// which every API version has: the endpoint's version need not be stripe-go's.
		IgnoreAPIVersionMismatch: true,
	})
	switch {
	case errors.Is(err, webhook.ErrNotSigned), errors.Is(err, webhook.ErrInvalidHeader),
		errors.Is(err, webhook.ErrNoValidSignature), errors.Is(err, webhook.ErrTooOld):
		return orderbackend.Notification{}, fmt.Errorf("%w: stripe: %w", orderbackend.ErrBadSignature, err)
	case err != nil:
		return orderbackend.Notification{}, fmt.Errorf("%w: stripe: %w", orderbackend.ErrBadNotification, err)
	}
	var outcome orderbackend.ChargeOutcome
	switch ev.Type {
	case stripe.EventTypePaymentIntentSucceeded:
		outcome = orderbackend.ChargeSucceeded
	case stripe.EventTypePaymentIntentPaymentFailed, stripe.EventTypePaymentIntentCanceled:
		outcome = orderbackend.ChargeFailed
	default:
		return orderbackend.Notification{}, fmt.Errorf("%w: stripe event %s of type %s", orderbackend.ErrIgnoredNotification, ev.ID, ev.Type)
	}
	if ev.Data == nil || len(ev.Data.Raw) == 0 {
		return orderbackend.Notification{}, fmt.Errorf("%w: stripe event %s has no data.object", orderbackend.ErrBadNotification, ev.ID)
	}
	var pi stripe.PaymentIntent
	if err := json.Unmarshal(ev.Data.Raw, &pi); err != nil {
		return orderbackend.Notification{}, fmt.Errorf("%w: stripe event %s: data.object: %w", orderbackend.ErrBadNotification, ev.ID, err)
	}
	if pi.ID == "" {
		return orderbackend.Notification{}, fmt.Errorf("%w: stripe event %s: data.object is not a payment intent", orderbackend.ErrBadNotification, ev.ID)
	}
	key := pi.Metadata[MetadataKey]
	if key == "" {
		return orderbackend.Notification{}, fmt.Errorf("%w: stripe event %s: payment intent %s has no %s: not this backend's",
			orderbackend.ErrIgnoredNotification, ev.ID, pi.ID, MetadataKey)
	}
	if !searchable(key) {
		return orderbackend.Notification{}, fmt.Errorf("%w: stripe event %s: %s %q is not a payment key",
			orderbackend.ErrBadNotification, ev.ID, MetadataKey, key)
	}
	return orderbackend.Notification{Provider: ProviderName, EventID: ev.ID, Key: key, Outcome: outcome, Ref: pi.ID}, nil
}
