package orderbackend

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Notification is a payment provider's verified report (a webhook event) about one payment
// attempt: what Notifier.ParseNotification reads and Repository.NotifyPayment stores.
type Notification struct {
	Provider string        // the provider's name, as in the notification path: "stripe", "webhook"
	EventID  string        // the provider's id of the event, unique per provider: a replay has the same
	Key      string        // the attempt's idempotency key (Payment.Key)
	Outcome  ChargeOutcome // succeeded, failed or pending (pending is stored and changes nothing)
	Ref      string        // the provider's id of the charge, when it has one
}

// NotifyResult is what NotifyPayment did: the attempt and its order as they are afterwards, and
// whether the event had been stored before (a replay, which changed nothing).
type NotifyResult struct {
	Payment   Payment
	Order     Order
	Duplicate bool
	Paid      bool // this notification paid the order
}

// Errors of notifications; ErrBadSignature (a signature missing, wrong or outside the provider's
// tolerance) is shared with forwarded winners.
var (
	// ErrBadNotification: a notification whose signature is valid but whose content is not one
	// (no event id, no payment key, an unknown outcome), or a body that is not the provider's format.
	ErrBadNotification = errors.New("malformed payment notification")
	// ErrIgnoredNotification: a valid notification of an event the backend has no use for (a
	// foreign event type, a payment not made by this backend); it is answered 200 and not stored.
	ErrIgnoredNotification = errors.New("payment notification ignored")
)

// maxNotifyField bounds a notification's ids.
const maxNotifyField = 255

// check refuses a notification NotifyPayment cannot store.
func (n Notification) check() error {
	for name, v := range map[string]string{"provider": n.Provider, "event id": n.EventID, "payment key": n.Key} {
		if v == "" || len(v) > maxNotifyField {
			return fmt.Errorf("%w: %s %q: want 1 to %d bytes", ErrBadNotification, name, v, maxNotifyField)
		}
	}
	switch n.Outcome {
	case ChargeSucceeded, ChargeFailed, ChargePending:
		return nil
	}
	return fmt.Errorf("%w: outcome %q: want succeeded, failed or pending", ErrBadNotification, n.Outcome)
}

// Notifier is a payment provider that reports outcomes by signed HTTP notifications (Stripe's
// webhooks, payments/webhookpay). The order API serves POST /orders/webhooks/{NotifyProvider()}
// for it, without a buyer's token: the signature is the authentication.
type Notifier interface {
	// NotifyProvider is the provider's name in the notification path and in payment_events.
	NotifyProvider() string
	// ParseNotification verifies a notification's signature over its body at now and reads it:
	// ErrBadSignature (missing, wrong, or older or newer than the provider's tolerance),
	// ErrBadNotification (signed but not understood) or ErrIgnoredNotification (an event type or
	// a payment that is not this backend's).
	ParseNotification(h http.Header, body []byte, now time.Time) (Notification, error)
}

// maxNotifyBody bounds a notification's body; Stripe's PaymentIntent events are a few KB.
const maxNotifyBody = 512 << 10

// The answers of the notification endpoint (docs/api.md, "Payment notifications").
var (
	errNotifyUnknownProvider = &apiError{status: http.StatusNotFound, code: "not_found",
		msg: "no payment provider of this name takes notifications here"}
	errNotifyTooLarge = &apiError{status: http.StatusRequestEntityTooLarge, code: "too_large",
		msg: "the notification is larger than 512 KiB"}
	errNotifyBadSignature = &apiError{status: http.StatusBadRequest, code: "bad_signature",
		msg: "the signature is missing, wrong, or outside the tolerance"}
	errNotifyBad = &apiError{status: http.StatusBadRequest, code: "bad_notification",
		msg: "the notification is not understood"}
	errNotifyUnknownPayment = &apiError{status: http.StatusNotFound, code: "unknown_payment",
		msg: "no payment attempt has this key"}
)

// notify serves POST /orders/webhooks/{provider}: it verifies the provider's signature and stores
// the outcome (NotifyPayment), answering 200 only once it is stored, so a provider that gets no
// 2xx delivers again. A replay is 200 duplicate; a refusal changes nothing. A success that can
// no longer pay its order becomes refund_due and the sweeper refunds it (the one refund path).
func (a *API) notify(w http.ResponseWriter, r *http.Request, provider string) {
	n, ok := a.opts.Payments.(Notifier)
	if !ok || n.NotifyProvider() != provider {
		// Not counted under the path's name: any caller could make up labels.
		a.opts.Metrics.Notifications.refused(notifyUnknownProvider, notifyRefusedUnknown)
		a.fail(w, errNotifyUnknownProvider)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		a.opts.Metrics.Notifications.refused(provider, notifyMethod)
		a.fail(w, &apiError{status: http.StatusMethodNotAllowed, code: "method_not_allowed", msg: "use POST"})
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxNotifyBody+1))
	if err != nil {
		a.opts.Metrics.Notifications.refused(provider, notifyBadNotification)
		a.fail(w, &apiError{status: http.StatusBadRequest, code: "bad_request", msg: "the body could not be read"})
		return
	}
	if len(body) > maxNotifyBody {
		a.opts.Metrics.Notifications.refused(provider, notifyTooLarge)
		a.fail(w, errNotifyTooLarge)
		return
	}
	now := a.opts.Now()
	note, err := n.ParseNotification(r.Header, body, now)
	switch {
	case errors.Is(err, ErrIgnoredNotification):
		a.opts.Metrics.Notifications.received(provider, notifyIgnored)
		a.opts.Logger.Debug("payment notification ignored", zap.String("provider", provider), zap.Error(err))
		a.reply(w, http.StatusOK, map[string]string{"code": "ignored", "message": err.Error()})
		return
	case errors.Is(err, ErrBadSignature):
		a.opts.Metrics.Notifications.refused(provider, notifyBadSignature)
		a.opts.Logger.Warn("payment notification refused: bad signature", zap.String("provider", provider), zap.Error(err))
		a.fail(w, errNotifyBadSignature)
		return
	case err != nil:
		a.opts.Metrics.Notifications.refused(provider, notifyBadNotification)
		a.opts.Logger.Warn("payment notification refused", zap.String("provider", provider), zap.Error(err))
		a.fail(w, errNotifyBad)
		return
	}
	note.Provider = provider
	res, err := a.repo.NotifyPayment(r.Context(), note, now)
	switch {
	case errors.Is(err, ErrNotFound):
		a.opts.Metrics.Notifications.refused(provider, notifyUnknownPayment)
		a.opts.Logger.Warn("payment notification refused: unknown attempt", zap.String("provider", provider),
			zap.String("event", note.EventID), zap.String("payment", note.Key))
		a.fail(w, errNotifyUnknownPayment)
		return
	case errors.Is(err, ErrBadNotification):
		a.opts.Metrics.Notifications.refused(provider, notifyBadNotification)
		a.opts.Logger.Warn("payment notification refused", zap.String("provider", provider),
			zap.String("event", note.EventID), zap.Error(err))
		a.fail(w, errNotifyBad)
		return
	case err != nil:
		a.opts.Metrics.Notifications.refused(provider, notifyUnstored)
		a.fail(w, a.dbError("store payment notification", err)) // 5xx: the provider delivers again
		return
	}
	code := notifyStored
	if res.Duplicate {
		code = notifyDuplicate
	}
	a.opts.Metrics.Notifications.received(provider, code)
	p, o := res.Payment, res.Order
	if res.Paid {
		a.opts.Metrics.Paid.Add(1)
		a.opts.OnChange()
	}
	a.opts.Logger.Info("payment notification", zap.String("provider", provider), zap.String("event", note.EventID),
		zap.String("payment", p.Key), zap.String("outcome", string(note.Outcome)), zap.String("status", string(p.Status)),
		zap.Bool("duplicate", res.Duplicate))
	a.reply(w, http.StatusOK, map[string]string{"code": code, "payment_key": p.Key, "payment_status": string(p.Status),
		"order_status": string(o.Status)})
}

// notifyUnknownProvider is the provider label of notifications posted to a path that names no
// provider of this backend: the path's name is the caller's, so it is never a label.
const notifyUnknownProvider = "unknown"

// The label values of NotificationCounts: the results of the notifications received (answered
// 200) and the reasons of those refused (4xx or 5xx).
const (
	notifyStored    = "stored"
	notifyDuplicate = "duplicate"
	notifyIgnored   = "ignored"

	notifyBadSignature    = "bad_signature"
	notifyBadNotification = "bad_notification"
	notifyUnknownPayment  = "unknown_payment"
	notifyTooLarge        = "too_large"
	notifyMethod          = "method"
	notifyUnstored        = "unstored"
	// notifyRefusedUnknown is the one reason counted under notifyUnknownProvider.
	notifyRefusedUnknown = "unknown_provider"
)

// notifyResults and notifyRefusals are every label value a provider's counters take. With the
// provider (one per backend, or notifyUnknownProvider) they bound the exported series.
var (
	notifyResults  = [...]string{notifyStored, notifyDuplicate, notifyIgnored}
	notifyRefusals = [...]string{notifyBadSignature, notifyBadNotification, notifyUnknownPayment, notifyTooLarge, notifyMethod, notifyUnstored}
)

// NotificationCounts counts the notification endpoint's answers by provider: received (by
// result: stored, duplicate, ignored) and refused (by reason: bad_signature, bad_notification,
// unknown_payment, too_large, method, unstored; unknown_provider under provider "unknown").
// The zero value is ready.
type NotificationCounts struct {
	mu    sync.Mutex
	recv  map[[2]string]int64
	refus map[[2]string]int64
}

// NotificationCount is one counter of NotificationCounts.
type NotificationCount struct {
	Provider string
	Label    string // the result (received) or the reason (refused)
	N        int64
}

func (c *NotificationCounts) received(provider, result string) { c.add(&c.recv, provider, result) }
func (c *NotificationCounts) refused(provider, reason string)  { c.add(&c.refus, provider, reason) }

// expect sets provider's counters that do not exist yet to 0, and the unknown provider's: a
// series that appears at 1 has no increase() in Prometheus, so a first refusal would go unseen.
func (c *NotificationCounts) expect(provider string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	zero := func(m *map[[2]string]int64, provider string, labels ...string) {
		if *m == nil {
			*m = map[[2]string]int64{}
		}
		for _, l := range labels {
			if _, ok := (*m)[[2]string{provider, l}]; !ok {
				(*m)[[2]string{provider, l}] = 0
			}
		}
	}
	zero(&c.refus, notifyUnknownProvider, notifyRefusedUnknown)
	if provider != "" {
		zero(&c.recv, provider, notifyResults[:]...)
		zero(&c.refus, provider, notifyRefusals[:]...)
	}
}

func (c *NotificationCounts) add(m *map[[2]string]int64, provider, label string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if *m == nil {
		*m = map[[2]string]int64{}
	}
	(*m)[[2]string{provider, label}]++
}

// Snapshot returns the received and refused counts, sorted by provider and label.
func (c *NotificationCounts) Snapshot() (received, refused []NotificationCount) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return sortedCounts(c.recv), sortedCounts(c.refus)
}

func sortedCounts(m map[[2]string]int64) []NotificationCount {
	out := make([]NotificationCount, 0, len(m))
	for k, n := range m {
		out = append(out, NotificationCount{Provider: k[0], Label: k[1], N: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Provider != out[j].Provider {
			return out[i].Provider < out[j].Provider
		}
		return out[i].Label < out[j].Label
	})
	return out
}

// Notifications returns the counts of the payment notifications the order API answered (see
// NotificationCounts.Snapshot), for NewNotificationCollector.
func (b *Backend) Notifications() (received, refused []NotificationCount) {
	return b.metrics.Notifications.Snapshot()
}

// The notification counters as Prometheus names them, beside the backend's other
// caddy_seckill_orders_* counters. Their labels are bounded: the provider is the backend's own
// or notifyUnknownProvider, the result and the reason are fixed words.
const (
	notificationsHelp        = "Payment notifications the order API answered 200, by provider and result: stored (an outcome recorded), duplicate (a replay, nothing changed), ignored (an event type or payment not the backend's)."
	notificationsRefusedHelp = "Payment notifications the order API refused, changing nothing, by provider and reason: bad_signature (a wrong or rotated secret, a clock skew, a forgery), bad_notification, unknown_payment, too_large, method, unstored (a database error, answered 5xx: the provider delivers again); unknown_provider under provider \"unknown\"."
)

var (
	notificationsDesc = prometheus.NewDesc("caddy_seckill_orders_notifications_total", notificationsHelp,
		[]string{"provider", "result"}, nil)
	notificationsRefusedDesc = prometheus.NewDesc("caddy_seckill_orders_notifications_refused_total", notificationsRefusedHelp,
		[]string{"provider", "reason"}, nil)
)

// NewNotificationCollector exports caddy_seckill_orders_notifications_total{provider,result} and
// caddy_seckill_orders_notifications_refused_total{provider,reason}, read from counts on every
// scrape (Backend.Notifications), for the embedded and the standalone backend alike.
func NewNotificationCollector(counts func() (received, refused []NotificationCount)) prometheus.Collector {
	return notificationCollector(counts)
}

type notificationCollector func() (received, refused []NotificationCount)

// Describe implements prometheus.Collector.
func (notificationCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- notificationsDesc
	ch <- notificationsRefusedDesc
}

// Collect implements prometheus.Collector.
func (c notificationCollector) Collect(ch chan<- prometheus.Metric) {
	received, refused := c()
	for _, n := range received {
		ch <- prometheus.MustNewConstMetric(notificationsDesc, prometheus.CounterValue, float64(n.N), n.Provider, n.Label)
	}
	for _, n := range refused {
		ch <- prometheus.MustNewConstMetric(notificationsRefusedDesc, prometheus.CounterValue, float64(n.N), n.Provider, n.Label)
	}
}
