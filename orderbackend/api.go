package orderbackend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/jwtauth"
)

// APIOptions configures the order API.
type APIOptions struct {
	Auth     Authenticator // required
	Payments Payments      // required
	// ChargeTimeout bounds a provider's Charge call; an answer not back by then is unknown and
	// the sweeper settles it. It must be shorter than the sweeper's SettleAfter, so that the
	// sweeper never asks about a charge still in flight (New sets it so); 30s.
	ChargeTimeout time.Duration
	Now           func() time.Time
	Logger        *zap.Logger
	Metrics       *Metrics
	OnChange      func() // called after a committed pay or cancel (wakes the relay)
}

// API is the order API of docs/api.md ("Order API"), an http.Handler for paths under /orders/:
//
//	GET  /orders/{id}         the order (owner only)
//	POST /orders/{id}/pay     200 {"code":"paid"}, 202 {"code":"payment_pending"}, 402, or 409 {"code":"expired"}
//	POST /orders/{id}/cancel  200 {"code":"cancelled"} or 409 {"code":"paid"}
//	POST /orders/webhooks/{provider}  a provider's signed notification (Notifier), no token
//
// Every other call needs the buyer's bearer token. Another user's order is answered exactly like a
// missing one (404 not_found), so order ids cannot be probed. Bodies are {"code","message",...}
// like the edge's.
type API struct {
	repo Repository
	opts APIOptions
}

// NewAPI returns the order API over repo.
func NewAPI(repo Repository, opts APIOptions) (*API, error) {
	if opts.Auth == nil {
		return nil, errors.New("order api: an Authenticator is required")
	}
	if opts.Payments == nil {
		return nil, errors.New("order api: a payment provider (Payments) is required")
	}
	defaultRuntime(&opts.Now, &opts.Logger, &opts.Metrics)
	if opts.ChargeTimeout <= 0 {
		opts.ChargeTimeout = 30 * time.Second
	}
	if opts.OnChange == nil {
		opts.OnChange = func() {}
	}
	provider := ""
	if n, ok := opts.Payments.(Notifier); ok {
		provider = n.NotifyProvider()
	}
	opts.Metrics.Notifications.expect(provider)
	return &API{repo: repo, opts: opts}, nil
}

// apiError is a refusal: a status and the stable machine word.
type apiError struct {
	status     int
	code, msg  string
	retryAfter bool
}

var (
	errAPINotFound     = &apiError{status: http.StatusNotFound, code: "not_found", msg: "no such order"}
	errAPIUnauthorized = &apiError{status: http.StatusUnauthorized, code: "unauthorized", msg: "a valid bearer token is required"}
	errAPIBusy         = &apiError{status: http.StatusServiceUnavailable, code: "busy", msg: "try again in a moment", retryAfter: true}
	errAPIExpired      = &apiError{status: http.StatusConflict, code: "expired", msg: "the payment window has closed; the order is cancelled"}
	errAPIPaid         = &apiError{status: http.StatusConflict, code: "paid", msg: "a paid order cannot be cancelled"}
	errAPIDeclined     = &apiError{status: http.StatusPaymentRequired, code: "payment_declined", msg: "the payment was declined"}
	errAPIBadPayBody   = &apiError{status: http.StatusBadRequest, code: "bad_request",
		msg: `the body must be empty or {"payment_method":"<id>"}: an id of 1 to 255 letters, digits and _`}
	errAPINeedsMethod = &apiError{status: http.StatusBadRequest, code: "payment_method_required",
		msg: `the payment provider needs the buyer's payment method: {"payment_method":"<id>"}`}
	errAPIInternal = &apiError{status: http.StatusInternalServerError, code: "internal", msg: "internal error"}
)

// orderJSON is an order as the API shows it.
type orderJSON struct {
	Code          string `json:"code"`
	OrderID       string `json:"order_id"`
	Activity      string `json:"activity"`
	ReservationID string `json:"reservation_id"`
	Qty           int64  `json:"qty"`
	Status        Status `json:"status"`
	CreatedMS     int64  `json:"created_ms"`
	PayBeforeMS   int64  `json:"pay_before_ms"`
	PaidMS        int64  `json:"paid_ms,omitempty"`
	CancelledMS   int64  `json:"cancelled_ms,omitempty"`
	Amount        int64  `json:"amount"`             // minor units of Currency; 0 without a price
	Currency      string `json:"currency,omitempty"` // ISO 4217
	Title         string `json:"title,omitempty"`
}

func toJSON(o Order) orderJSON {
	j := orderJSON{
		Code: string(o.Status), OrderID: o.ID, Activity: o.Activity, ReservationID: o.ReservationID, Qty: o.Qty,
		Status: o.Status, CreatedMS: o.CreatedAt.UnixMilli(), PayBeforeMS: o.ExpiresAt.UnixMilli(),
		Amount: o.Amount.Amount, Currency: o.Amount.Currency, Title: o.Title,
	}
	if !o.PaidAt.IsZero() {
		j.PaidMS = o.PaidAt.UnixMilli()
	}
	if !o.CancelledAt.IsZero() {
		j.CancelledMS = o.CancelledAt.UnixMilli()
	}
	return j
}

// ServeHTTP implements http.Handler.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if provider, ok := strings.CutPrefix(r.URL.Path, "/orders/webhooks/"); ok {
		a.notify(w, r, provider) // no buyer's token: the provider's signature authenticates
		return
	}
	id, action, ok := splitOrderPath(r.URL.Path)
	if !ok {
		a.fail(w, errAPINotFound)
		return
	}
	want := http.MethodPost
	if action == "" {
		want = http.MethodGet
	}
	if r.Method != want && (want != http.MethodGet || r.Method != http.MethodHead) {
		w.Header().Set("Allow", want)
		a.fail(w, &apiError{status: http.StatusMethodNotAllowed, code: "method_not_allowed", msg: "use " + want})
		return
	}
	user, aerr := a.authenticate(r)
	if aerr != nil {
		a.fail(w, aerr)
		return
	}
	// The buyer from the token picks the order's partition; someone else's order is not there for
	// this caller (ErrNotFound).
	o, err := a.repo.BuyerOrder(r.Context(), user, id)
	if err != nil {
		a.fail(w, a.dbError("read order", err))
		return
	}
	switch action {
	case "":
		a.reply(w, http.StatusOK, toJSON(o))
	case "pay":
		a.pay(w, r, o)
	case "cancel":
		a.cancel(w, r, o)
	}
}

// splitOrderPath accepts /orders/{id}, /orders/{id}/pay and /orders/{id}/cancel.
func splitOrderPath(p string) (id, action string, ok bool) {
	rest, found := strings.CutPrefix(p, "/orders/")
	if !found {
		return "", "", false
	}
	id, action, _ = strings.Cut(rest, "/")
	if !validOrderID(id) || (action != "" && action != "pay" && action != "cancel") {
		return "", "", false
	}
	return id, action, true
}

func (a *API) authenticate(r *http.Request) (string, *apiError) {
	tok, err := jwtauth.TokenFromRequest(r)
	if err != nil {
		return "", errAPIUnauthorized
	}
	user, err := a.opts.Auth.Verify(r.Context(), tok)
	switch {
	case err == nil && user != "":
		return user, nil
	case err == nil, errors.Is(err, jwtauth.ErrUnauthorized):
		return "", errAPIUnauthorized
	}
	a.opts.Logger.Warn("verifying a token failed", zap.Error(err))
	return "", errAPIBusy
}

// pay records a payment attempt, charges it under the attempt's key and records the outcome
// (orderbackend/README.md, "Payments"). The attempt is in the database before the provider is
// called, so a charge whose answer is lost is found and settled by the sweeper; a charge that
// succeeds after the window closed is refunded. No row lock is held while the provider works.
func (a *API) pay(w http.ResponseWriter, r *http.Request, o Order) {
	ctx := r.Context()
	method, ok := readPayBody(r)
	if !ok {
		a.fail(w, errAPIBadPayBody)
		return
	}
	if o.Status == StatusPaid {
		a.reply(w, http.StatusOK, toJSON(o))
		return
	}
	if req, ok := a.opts.Payments.(PaymentMethodRequirer); ok && req.RequiresPaymentMethod() && method == "" {
		a.fail(w, errAPINeedsMethod)
		return
	}
	p, err := a.repo.BuyerStartPayment(ctx, o.User, o.ID, a.opts.Now())
	switch {
	case errors.Is(err, ErrNotPending): // paid meanwhile
		a.replyOrder(w, r, o)
		return
	case errors.Is(err, ErrExpired):
		a.fail(w, errAPIExpired)
		return
	case err != nil:
		a.fail(w, a.dbError("start payment", err))
		return
	}
	cctx, cancel := context.WithTimeout(ctx, a.opts.ChargeTimeout)
	res, err := a.opts.Payments.Charge(cctx, ChargeRequest{Key: p.Key, Order: o, Amount: p.Amount, PaymentMethod: method})
	cancel()
	if err != nil {
		// The outcome is unknown: the attempt stays open; a retry charges under the same key,
		// and the sweeper asks the provider if nobody retries.
		a.opts.Logger.Warn("payment provider failed", zap.String("order", o.ID), zap.String("payment", p.Key), zap.Error(err))
		a.fail(w, errAPIBusy)
		return
	}
	if res.Outcome == ChargePending {
		body := map[string]string{"code": "payment_pending", "order_id": o.ID,
			"message": "the provider confirms the payment later; poll the order"}
		if res.NextURL != "" {
			body["next_url"] = res.NextURL // where the buyer pays
		}
		a.reply(w, http.StatusAccepted, body)
		return
	}
	// The request may be gone; the outcome must still be stored.
	p, paid, err := a.repo.SettlePayment(context.WithoutCancel(ctx), p.Key, res.Outcome, res.Ref, a.opts.Now())
	if err != nil {
		a.fail(w, a.dbError("record payment", err))
		return
	}
	switch p.Status {
	case PaymentFailed:
		a.fail(w, errAPIDeclined)
		return
	case PaymentRefundDue:
		if _, err := refundDue(context.WithoutCancel(ctx), a.repo, a.opts.Payments, p, a.opts.Now(), a.opts.Logger, a.opts.Metrics); err != nil {
			// Still refund_due: the sweeper tries again.
			a.opts.Logger.Warn("refund failed; the sweeper retries", zap.String("payment", p.Key), zap.Error(err))
		}
	}
	if paid.Status != StatusPaid {
		a.fail(w, errAPIExpired)
		return
	}
	if paid.PaymentRef == p.Key && p.Status == PaymentSucceeded {
		a.opts.Metrics.Paid.Add(1)
		a.opts.OnChange()
	}
	a.reply(w, http.StatusOK, toJSON(paid))
}

// maxPayBody bounds the pay call's body: {"payment_method":"<id>"} is far shorter.
const maxPayBody = 4 << 10

// readPayBody reads the pay call's optional body {"payment_method":"<id>"}: the method ("" for an
// empty body or an absent field), and false for anything else (other fields, a malformed id).
func readPayBody(r *http.Request) (string, bool) {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxPayBody+1))
	if err != nil || len(b) > maxPayBody {
		return "", false
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return "", true
	}
	var body struct {
		PaymentMethod *string `json:"payment_method"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil || dec.More() {
		return "", false
	}
	if body.PaymentMethod == nil {
		return "", true
	}
	return *body.PaymentMethod, validPaymentMethod(*body.PaymentMethod)
}

// validPaymentMethod accepts a provider's token: 1 to 255 letters, digits and '_' (Stripe's pm_…).
func validPaymentMethod(s string) bool {
	if len(s) == 0 || len(s) > 255 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_':
		default:
			return false
		}
	}
	return true
}

// replyOrder answers with the order as it is now.
func (a *API) replyOrder(w http.ResponseWriter, r *http.Request, was Order) {
	o, err := a.repo.BuyerOrder(r.Context(), was.User, was.ID)
	if err != nil {
		a.fail(w, a.dbError("read order", err))
		return
	}
	a.reply(w, http.StatusOK, toJSON(o))
}

func (a *API) cancel(w http.ResponseWriter, r *http.Request, o Order) {
	c, err := a.repo.BuyerCancel(r.Context(), o.User, o.ID, a.opts.Now())
	switch {
	case err == nil:
		if o.Status == StatusPending {
			a.opts.Metrics.Cancelled.Add(1)
			a.opts.OnChange()
		}
		a.reply(w, http.StatusOK, toJSON(c))
	case errors.Is(err, ErrNotPending):
		a.fail(w, errAPIPaid)
	default:
		a.fail(w, a.dbError("cancel order", err))
	}
}

func (a *API) dbError(op string, err error) *apiError {
	switch {
	case errors.Is(err, ErrNotFound):
		return errAPINotFound
	case errors.Is(err, ErrUnavailable):
		a.opts.Logger.Warn(op+": database unavailable", zap.Error(err))
		return errAPIBusy
	}
	a.opts.Logger.Error(op+" failed", zap.Error(err))
	return errAPIInternal
}

func (a *API) fail(w http.ResponseWriter, e *apiError) {
	if e.retryAfter {
		w.Header().Set("Retry-After", "1")
	}
	if e.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="orders"`)
	}
	a.reply(w, e.status, map[string]string{"code": e.code, "message": e.msg})
}

func (a *API) reply(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		a.opts.Logger.Error("encode reply", zap.Error(err))
		status, b = http.StatusInternalServerError, []byte(`{"code":"internal","message":"internal error"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Length", fmt.Sprint(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
