package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// ledgerSecret is the secret key the gateways give payments stripe; the ledger refuses any other.
const ledgerSecret = "sk_test_chaosledger"

// ledger is a Stripe that remembers: an HTTP server speaking the part of Stripe's REST API that
// payments/stripepay uses — PaymentIntents created and confirmed at once (POST
// /v1/payment_intents), retrieved, cancelled, searched by metadata (GET
// /v1/payment_intents/search), and refunds (POST /v1/refunds) — with Stripe's Idempotency-Key
// rules: a key's first request is carried out once and its answer replayed to every repeat; a
// repeat with other parameters is 400 idempotency_error; a repeat while the first is still running
// is 409. stripe-mock is Stripe's own server of the API but keeps nothing, so it cannot tell a
// charge taken twice or a refund given twice; the ledger can. The real stripepay provider, inside
// the real gateways, talks to it through `api_base`.
//
// The test can take it down (its port closed: connection refused, every open connection cut),
// make it answer a charge late (the money is taken at once, the answer held), make new
// PaymentIntents `processing` for a while before they succeed (a success that comes after the
// window), and run a hook after a charge is taken and before it is answered (to SIGKILL the
// gateway that asked).
type ledger struct {
	t    *testing.T
	addr string // 127.0.0.1:port, kept across downs
	// validate, when set, is a stripe-mock base URL every request is also sent to: stripe-mock
	// checks parameters against Stripe's API specification, and an answer of 400 there fails
	// the test (the provider sent something real Stripe would refuse).
	validate string

	mu      sync.Mutex
	srv     *http.Server
	up      bool
	seq     int
	intents map[string]*ledgerIntent
	order   []string // intent ids in creation order
	refunds map[string]*ledgerRefund
	idem    map[string]*idemEntry

	behave      func(order string) chargeBehaviour // nil: every charge succeeds and is answered at once
	afterCharge func(key string)

	// events are the webhook events of the PaymentIntents' changes after their creation
	// (stripe_ledger_events_test.go), by PaymentIntent, not yet taken for delivery.
	events  map[string][]ledgerEvent
	emitted int

	// Counts of what reached it.
	creates, replays, conflicts, searches, refundCalls int
}

// ledgerIntent is one PaymentIntent.
type ledgerIntent struct {
	ID, Currency, Method, Key, Order string
	Amount                           int64
	Created                          time.Time
	SucceedAt                        time.Time // zero: succeeded at creation
	Cancelled                        bool
	Refunds                          []string
	// Failed: the payment failed while processing (Stripe's payment_intent.payment_failed); the
	// PaymentIntent is back to requires_payment_method and took no money.
	Failed bool
}

// ledgerRefund is one refund.
type ledgerRefund struct {
	ID, Intent, Key string
	Amount          int64
}

// idemEntry is what Stripe keeps per Idempotency-Key: the request it came with and its answer.
type idemEntry struct {
	fingerprint string
	done        bool
	status      int
	body        []byte
}

func startLedger(t *testing.T) *ledger {
	t.Helper()
	l := &ledger{t: t, intents: map[string]*ledgerIntent{}, refunds: map[string]*ledgerRefund{}, idem: map[string]*idemEntry{},
		events: map[string][]ledgerEvent{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.addr = ln.Addr().String()
	l.serve(ln)
	t.Cleanup(func() { l.setDown(true) })
	return l
}

// url is the base URL for payments stripe's api_base.
func (l *ledger) url() string { return "http://" + l.addr }

func (l *ledger) serve(ln net.Listener) {
	srv := &http.Server{Handler: l, ReadHeaderTimeout: 5 * time.Second}
	l.mu.Lock()
	l.srv, l.up = srv, true
	l.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

// setDown closes the port and cuts every connection (down) or listens on it again (up).
func (l *ledger) setDown(down bool) {
	l.t.Helper()
	l.mu.Lock()
	srv, up := l.srv, l.up
	l.mu.Unlock()
	switch {
	case down && up:
		_ = srv.Close()
		l.mu.Lock()
		l.up = false
		l.mu.Unlock()
	case !down && !up:
		var ln net.Listener
		var err error
		for i := 0; i < 50; i++ { // the port was just closed; it is ours again at once on loopback
			if ln, err = net.Listen("tcp", l.addr); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			l.t.Fatalf("ledger: listen again on %s: %v", l.addr, err)
		}
		l.serve(ln)
	}
}

// chargeBehaviour is how the ledger treats a new charge of an order.
type chargeBehaviour struct {
	answerDelay time.Duration // the answer is held this long after the money is taken
	processing  time.Duration // the PaymentIntent is processing this long, then succeeds
}

// setBehaviour decides, per order (the PaymentIntent's seckill_order metadata), how its new
// charges go.
func (l *ledger) setBehaviour(f func(order string) chargeBehaviour) {
	l.mu.Lock()
	l.behave = f
	l.mu.Unlock()
}

// setAfterCharge runs f(key) after a new charge is taken and before it is answered (nil: none).
func (l *ledger) setAfterCharge(f func(key string)) {
	l.mu.Lock()
	l.afterCharge = f
	l.mu.Unlock()
}

// stripeErr is Stripe's error body.
func stripeErr(w http.ResponseWriter, status int, typ, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"type": typ, "code": code, "message": msg}})
	_, _ = w.Write(b)
}

var (
	intentPath   = regexp.MustCompile(`^/v1/payment_intents/(pi_[A-Za-z0-9]+)(/cancel)?$`)
	searchClause = regexp.MustCompile(`^metadata\['([A-Za-z0-9_]+)'\]:'([A-Za-z0-9_-]+)'$`)
)

func (l *ledger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+ledgerSecret {
		stripeErr(w, http.StatusUnauthorized, "invalid_request_error", "", "Invalid API Key provided")
		return
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		stripeErr(w, http.StatusBadRequest, "invalid_request_error", "", "malformed body")
		return
	}
	if l.validate != "" {
		l.validateWithMock(r, body)
	}
	if r.Method == http.MethodGet {
		l.serveGet(w, r)
		return
	}
	if r.Method != http.MethodPost {
		stripeErr(w, http.StatusMethodNotAllowed, "invalid_request_error", "", "method not allowed")
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		// stripepay sends one with every POST; a POST without one could take money twice.
		l.t.Errorf("ledger: %s %s without an Idempotency-Key", r.Method, r.URL.Path)
		stripeErr(w, http.StatusBadRequest, "invalid_request_error", "", "Idempotency-Key required by this ledger")
		return
	}
	fp := r.URL.Path + "?" + canonical(form)
	l.mu.Lock()
	if e, ok := l.idem[key]; ok {
		switch {
		case e.fingerprint != fp:
			l.mu.Unlock()
			stripeErr(w, http.StatusBadRequest, "idempotency_error", "",
				"Keys for idempotent requests can only be used with the same parameters they were first used with.")
			return
		case !e.done:
			l.conflicts++
			l.mu.Unlock()
			stripeErr(w, http.StatusConflict, "idempotency_error", "",
				"There is currently another in-progress request using this Idempotent Key.")
			return
		}
		l.replays++
		status, b := e.status, e.body
		l.mu.Unlock()
		w.Header().Set("Idempotent-Replayed", "true")
		writeJSON(w, status, b)
		return
	}
	entry := &idemEntry{fingerprint: fp}
	l.idem[key] = entry
	l.mu.Unlock()

	var (
		status int
		out    []byte
		charge bool
		how    chargeBehaviour
	)
	l.mu.Lock()
	if l.behave != nil && r.URL.Path == "/v1/payment_intents" {
		how = l.behave(form.Get("metadata[seckill_order]"))
	}
	l.mu.Unlock()
	switch m := intentPath.FindStringSubmatch(r.URL.Path); {
	case r.URL.Path == "/v1/payment_intents":
		status, out = l.createIntent(form, how.processing)
		charge = status == http.StatusOK
	case m != nil && m[2] == "/cancel":
		status, out = l.cancelIntent(m[1])
	case r.URL.Path == "/v1/refunds":
		status, out = l.createRefund(form, key)
	default:
		status, out = http.StatusNotFound, errBody("invalid_request_error", "", "Unrecognized request URL")
	}
	l.mu.Lock()
	entry.done, entry.status, entry.body = true, status, out
	delay, hook := how.answerDelay, l.afterCharge
	l.mu.Unlock()
	if charge {
		if hook != nil {
			hook(form.Get("metadata[seckill_key]"))
		}
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-r.Context().Done():
				return // the caller gave up: the money is taken, the answer is lost
			}
		}
	}
	writeJSON(w, status, out)
}

func writeJSON(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func errBody(typ, code, msg string) []byte {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"type": typ, "code": code, "message": msg}})
	return b
}

// canonical is a form's parameters in a stable order, the fingerprint of a request.
func canonical(f url.Values) string {
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s&", k, strings.Join(f[k], ","))
	}
	return b.String()
}

// createIntent takes the money: a PaymentIntent confirmed with its payment method.
func (l *ledger) createIntent(f url.Values, processing time.Duration) (int, []byte) {
	amount, err := strconv.ParseInt(f.Get("amount"), 10, 64)
	switch {
	case err != nil || amount <= 0:
		return http.StatusBadRequest, errBody("invalid_request_error", "parameter_invalid_integer", "amount must be a positive integer")
	case f.Get("currency") == "" || f.Get("payment_method") == "":
		return http.StatusBadRequest, errBody("invalid_request_error", "parameter_missing", "currency and payment_method are required")
	case f.Get("confirm") != "true":
		return http.StatusBadRequest, errBody("invalid_request_error", "", "this ledger only takes confirm=true")
	case f.Get("payment_method") == "pm_card_chargeDeclined":
		return http.StatusPaymentRequired, errBody("card_error", "card_declined", "Your card was declined.")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.creates++
	l.seq++
	now := time.Now()
	pi := &ledgerIntent{ID: fmt.Sprintf("pi_chaos%06d", l.seq), Amount: amount, Currency: f.Get("currency"),
		Method: f.Get("payment_method"), Key: f.Get("metadata[seckill_key]"), Order: f.Get("metadata[seckill_order]"),
		Created: now}
	if processing > 0 {
		pi.SucceedAt = now.Add(processing)
	}
	l.intents[pi.ID] = pi
	l.order = append(l.order, pi.ID)
	return http.StatusOK, l.intentJSON(pi, now)
}

// status is the PaymentIntent's status at now.
func (pi *ledgerIntent) status(now time.Time) string {
	switch {
	case pi.Cancelled:
		return "canceled"
	case pi.Failed:
		return "requires_payment_method"
	case !pi.SucceedAt.IsZero() && now.Before(pi.SucceedAt):
		return "processing"
	}
	return "succeeded"
}

func (l *ledger) intentJSON(pi *ledgerIntent, now time.Time) []byte {
	b, _ := json.Marshal(l.intentObject(pi, now))
	return b
}

func (l *ledger) intentObject(pi *ledgerIntent, now time.Time) map[string]any {
	st := pi.status(now)
	received := int64(0)
	if st == "succeeded" {
		received = pi.Amount
	}
	return map[string]any{
		"id": pi.ID, "object": "payment_intent", "amount": pi.Amount, "amount_received": received,
		"currency": pi.Currency, "status": st, "payment_method": pi.Method, "livemode": false,
		"created": pi.Created.Unix(), "metadata": map[string]string{"seckill_key": pi.Key, "seckill_order": pi.Order},
	}
}

func (l *ledger) cancelIntent(id string) (int, []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	pi, ok := l.intents[id]
	if !ok {
		return http.StatusNotFound, errBody("invalid_request_error", "resource_missing", "No such payment_intent: "+id)
	}
	if st := pi.status(time.Now()); st == "succeeded" || st == "processing" {
		return http.StatusBadRequest, errBody("invalid_request_error", "payment_intent_unexpected_state",
			"You cannot cancel this PaymentIntent because it has a status of "+st+".")
	}
	pi.Cancelled = true
	l.emit(pi, "payment_intent.canceled", time.Now())
	return http.StatusOK, l.intentJSON(pi, time.Now())
}

// createRefund gives back a succeeded PaymentIntent's money, once.
func (l *ledger) createRefund(f url.Values, key string) (int, []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refundCalls++
	id := f.Get("payment_intent")
	pi, ok := l.intents[id]
	if !ok {
		return http.StatusNotFound, errBody("invalid_request_error", "resource_missing", "No such payment_intent: "+id)
	}
	amount := pi.Amount
	if s := f.Get("amount"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 || n > pi.Amount {
			return http.StatusBadRequest, errBody("invalid_request_error", "amount_too_large", "refund amount "+s+" is not within the charge")
		}
		amount = n
	}
	switch {
	case pi.status(time.Now()) != "succeeded":
		return http.StatusBadRequest, errBody("invalid_request_error", "", "This PaymentIntent has not succeeded: nothing to refund.")
	case len(pi.Refunds) > 0:
		return http.StatusBadRequest, errBody("invalid_request_error", "charge_already_refunded",
			"Charge for "+pi.ID+" has already been refunded.")
	}
	l.seq++
	re := &ledgerRefund{ID: fmt.Sprintf("re_chaos%06d", l.seq), Intent: pi.ID, Key: key, Amount: amount}
	l.refunds[re.ID] = re
	pi.Refunds = append(pi.Refunds, re.ID)
	b, _ := json.Marshal(map[string]any{"id": re.ID, "object": "refund", "amount": amount, "currency": pi.Currency,
		"payment_intent": pi.ID, "status": "succeeded", "metadata": map[string]string{"seckill_key": f.Get("metadata[seckill_key]")}})
	return http.StatusOK, b
}

func (l *ledger) serveGet(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	if r.URL.Path == "/v1/payment_intents/search" {
		m := searchClause.FindStringSubmatch(r.URL.Query().Get("query"))
		if m == nil {
			stripeErr(w, http.StatusBadRequest, "invalid_request_error", "", "this ledger searches metadata['k']:'v' only")
			return
		}
		l.mu.Lock()
		l.searches++
		data := []map[string]any{}
		for _, id := range l.order {
			pi := l.intents[id]
			if (m[1] == "seckill_key" && pi.Key == m[2]) || (m[1] == "seckill_order" && pi.Order == m[2]) {
				data = append(data, l.intentObject(pi, now))
			}
		}
		l.mu.Unlock()
		b, _ := json.Marshal(map[string]any{"object": "search_result", "url": "/v1/payment_intents/search",
			"data": data, "has_more": false, "next_page": nil})
		writeJSON(w, http.StatusOK, b)
		return
	}
	if m := intentPath.FindStringSubmatch(r.URL.Path); m != nil && m[2] == "" {
		l.mu.Lock()
		pi, ok := l.intents[m[1]]
		var b []byte
		if ok {
			b = l.intentJSON(pi, now)
		}
		l.mu.Unlock()
		if !ok {
			stripeErr(w, http.StatusNotFound, "invalid_request_error", "resource_missing", "No such payment_intent: "+m[1])
			return
		}
		writeJSON(w, http.StatusOK, b)
		return
	}
	stripeErr(w, http.StatusNotFound, "invalid_request_error", "", "Unrecognized request URL")
}

// validateWithMock sends the request to stripe-mock too; stripe-mock validates it against
// Stripe's API specification and answers 400 to a parameter Stripe does not have.
func (l *ledger) validateWithMock(r *http.Request, body []byte) {
	req, err := http.NewRequestWithContext(context.Background(), r.Method, l.validate+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		l.t.Errorf("ledger: validate %s %s: %v", r.Method, r.URL.Path, err)
		return
	}
	for _, h := range []string{"Authorization", "Content-Type", "Idempotency-Key", "Stripe-Version"} {
		req.Header.Set(h, r.Header.Get(h))
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		l.t.Errorf("ledger: validate %s %s with stripe-mock: %v", r.Method, r.URL.Path, err)
		return
	}
	defer func() { _ = res.Body.Close() }()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode >= 400 {
		l.t.Errorf("stripe-mock refused what the provider sent the ledger: %s %s %s → %d %s", r.Method, r.URL.Path, body, res.StatusCode, b)
	}
}

// ledgerTotals is the ledger's own account of the money.
type ledgerTotals struct {
	Intents, Succeeded, Processing, Cancelled int
	ChargedAmount                             int64 // of the succeeded intents
	Refunds                                   int
	RefundedAmount                            int64
	MultiRefunded                             int            // intents refunded more than once: must be 0
	ChargesPerOrder                           map[string]int // order → succeeded intents
	KeptPerOrder                              map[string]int // order → succeeded intents not refunded
	RefundedKeys                              map[string]bool
	SucceededKeys                             map[string]bool
}

func (l *ledger) totals() ledgerTotals {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	t := ledgerTotals{ChargesPerOrder: map[string]int{}, KeptPerOrder: map[string]int{}, RefundedKeys: map[string]bool{},
		SucceededKeys: map[string]bool{}}
	for _, id := range l.order {
		pi := l.intents[id]
		t.Intents++
		switch pi.status(now) {
		case "succeeded":
			t.Succeeded++
			t.ChargedAmount += pi.Amount
			t.ChargesPerOrder[pi.Order]++
			t.SucceededKeys[pi.Key] = true
			if len(pi.Refunds) == 0 {
				t.KeptPerOrder[pi.Order]++
			} else {
				t.RefundedKeys[pi.Key] = true
			}
		case "processing":
			t.Processing++
		case "canceled":
			t.Cancelled++
		}
		if len(pi.Refunds) > 1 {
			t.MultiRefunded++
		}
	}
	for _, re := range l.refunds {
		t.Refunds++
		t.RefundedAmount += re.Amount
	}
	return t
}

func (l *ledger) counts() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("creates %d, idempotent replays %d, 409 in progress %d, searches %d, refund calls %d",
		l.creates, l.replays, l.conflicts, l.searches, l.refundCalls)
}
