package chaos

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"
)

// ledgerWebhookSecret is the signing secret of the gateways' Stripe webhook endpoint
// (payments stripe webhook_secret) in the notification scenario.
const ledgerWebhookSecret = "whsec_chaosledger"

// ledgerEvent is one Stripe event as the ledger sends it to a webhook endpoint: an Event whose
// data.object is the PaymentIntent as it was when the event was made.
type ledgerEvent struct {
	ID   string
	Body []byte
}

// eventBody is Stripe's Event JSON of type typ about obj. The api_version is not stripe-go's on
// purpose: the provider reads only fields every version has and must not refuse another.
func eventBody(id, typ string, obj map[string]any, now time.Time) []byte {
	b, _ := json.Marshal(map[string]any{
		"id": id, "object": "event", "type": typ, "api_version": "2020-08-27", "created": now.Unix(),
		"livemode": false, "pending_webhooks": 1, "request": map[string]any{"id": nil, "idempotency_key": nil},
		"data": map[string]any{"object": obj},
	})
	return b
}

// newEvent is a fresh event of type typ about obj, made at now; the caller holds l.mu.
func (l *ledger) newEvent(typ string, obj map[string]any, now time.Time) ledgerEvent {
	l.emitted++
	id := fmt.Sprintf("evt_chaos%06d", l.emitted)
	return ledgerEvent{ID: id, Body: eventBody(id, typ, obj, now)}
}

// emit records the event of a change of pi at now for delivery; the caller holds l.mu.
func (l *ledger) emit(pi *ledgerIntent, typ string, now time.Time) {
	l.events[pi.ID] = append(l.events[pi.ID], l.newEvent(typ, l.intentObject(pi, now), now))
}

// finish ends a PaymentIntent that is processing, as Stripe does when the bank answers:
// "succeeded" (it takes the money: payment_intent.succeeded), "failed" (no money, back to
// requires_payment_method: payment_intent.payment_failed) or "canceled"
// (payment_intent.canceled). The event is recorded for takeEvents.
func (l *ledger) finish(id, outcome string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	pi, ok := l.intents[id]
	now := time.Now()
	switch {
	case !ok:
		return fmt.Errorf("ledger: finish %s: no such PaymentIntent", id)
	case pi.status(now) != "processing":
		return fmt.Errorf("ledger: finish %s %s: it is %s, not processing", id, outcome, pi.status(now))
	}
	switch outcome {
	case "succeeded":
		pi.SucceedAt = now
		l.emit(pi, "payment_intent.succeeded", now)
	case "failed":
		pi.Failed = true
		l.emit(pi, "payment_intent.payment_failed", now)
	case "canceled":
		pi.Cancelled = true
		l.emit(pi, "payment_intent.canceled", now)
	default:
		return fmt.Errorf("ledger: finish %s: unknown outcome %q", id, outcome)
	}
	return nil
}

// cancelAbandoned cancels a PaymentIntent whose payment failed (the shop tidying up abandoned
// PaymentIntents; Stripe sends payment_intent.canceled). It reports whether it changed anything:
// the gateway's sweeper may have cancelled it first (stripepay's Lookup does).
func (l *ledger) cancelAbandoned(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	pi, ok := l.intents[id]
	if !ok || pi.Cancelled || pi.status(time.Now()) != "requires_payment_method" {
		return false
	}
	pi.Cancelled = true
	l.emit(pi, "payment_intent.canceled", time.Now())
	return true
}

// takeEvents returns the events of PaymentIntent id not taken before, oldest first.
func (l *ledger) takeEvents(id string) []ledgerEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	evs := l.events[id]
	delete(l.events, id)
	return evs
}

// untaken counts the events made and not taken for delivery.
func (l *ledger) untaken() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, evs := range l.events {
		n += len(evs)
	}
	return n
}

// event makes an event of any type about PaymentIntent id as it is now (one Stripe sends for a
// change the provider takes no interest in, such as payment_intent.processing or
// charge.succeeded), not recorded.
func (l *ledger) event(id, typ string) (ledgerEvent, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	pi, ok := l.intents[id]
	if !ok {
		return ledgerEvent{}, fmt.Errorf("ledger: event %s of %s: no such PaymentIntent", typ, id)
	}
	now := time.Now()
	return l.newEvent(typ, l.intentObject(pi, now), now), nil
}

// forged is an event the ledger never made: its PaymentIntent object is obj (a made-up or
// altered one), for the refused and ignored notifications.
func (l *ledger) forged(typ string, obj map[string]any) ledgerEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.newEvent(typ, obj, time.Now())
}

// intentOf is the id of the PaymentIntent charged under a payment key ("" if none).
func (l *ledger) intentOf(key string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range l.order {
		if l.intents[id].Key == key {
			return id
		}
	}
	return ""
}

// object is PaymentIntent id's JSON object as it is now (nil if there is none).
func (l *ledger) object(id string) map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	pi, ok := l.intents[id]
	if !ok {
		return nil
	}
	return l.intentObject(pi, time.Now())
}

// stripeSignature is the Stripe-Signature header of body signed with secret at ts, made by
// stripe-go's own helper (t=<unix>,v1=<HMAC-SHA256 of "t.body">).
func stripeSignature(body []byte, secret string, ts time.Time) http.Header {
	p := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: ts})
	return http.Header{"Stripe-Signature": {p.Header}}
}
