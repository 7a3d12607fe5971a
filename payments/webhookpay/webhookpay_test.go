package webhookpay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/money"
	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

var testSecret = []byte("0123456789abcdef")

// TestSignVector: the signature of a known message, computed independently (Python's hmac), so
// that a shop in another language has a vector to test against.
func TestSignVector(t *testing.T) {
	body := []byte(`{"id":"evt_1","key":"o1-1","outcome":"succeeded"}`)
	const want = "t=1700000000,v1=98d849ae55b2b5155192e8be93964dc4351d6f81183ef73f6031ab55099d1bce"
	if got := Sign(testSecret, time.Unix(1700000000, 0), body); got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
	at := time.Unix(1700000000, 0)
	if err := Verify(testSecret, want, body, at.Add(4*time.Minute), DefaultTolerance); err != nil {
		t.Errorf("Verify within the tolerance: %v", err)
	}
	// Two v1 entries (a secret being rotated): either may match.
	if err := Verify(testSecret, "t=1700000000,v1=00ff,v1="+want[len("t=1700000000,v1="):], body, at, DefaultTolerance); err != nil {
		t.Errorf("Verify with a rotated secret's entry first: %v", err)
	}
	for name, c := range map[string]struct {
		secret []byte
		header string
		body   []byte
		now    time.Time
	}{
		"old":          {testSecret, want, body, at.Add(6 * time.Minute)},
		"future":       {testSecret, want, body, at.Add(-6 * time.Minute)},
		"other body":   {testSecret, want, []byte(`{"id":"evt_1","key":"o1-1","outcome":"failed"}`), at},
		"other secret": {[]byte("fedcba9876543210"), want, body, at},
		"no secret":    {nil, want, body, at},
		"no header":    {testSecret, "", body, at},
		"no time":      {testSecret, "v1=" + want[len("t=1700000000,v1="):], body, at},
		"no v1":        {testSecret, "t=1700000000,v0=ab", body, at},
		"garbled":      {testSecret, "t=1700000000;v1=ab", body, at},
		"moved time":   {testSecret, strings.Replace(want, "1700000000", "1700000001", 1), body, at},
	} {
		if err := Verify(c.secret, c.header, c.body, c.now, DefaultTolerance); !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s: %v, want ErrBadSignature", name, err)
		}
	}
}

// shop is a shop's payment service as README.md describes it: it verifies every request's
// signature, keeps charges and refunds by key (a repeated request is the same), and signs its
// answers. answerSecret signs the answers (the provider's secret unless a test changes it).
type shop struct {
	t            *testing.T
	mu           sync.Mutex
	charged      map[string]Request // key → the charge request
	succeeded    map[string]bool    // key → the buyer paid on the shop's page
	refunds      map[string]int     // key → refund requests
	refused      int                // requests whose signature did not verify
	status       int                // answer with this status instead (0: 200)
	answerSecret []byte
	srv          *httptest.Server
}

func newShop(t *testing.T) *shop {
	s := &shop{t: t, charged: map[string]Request{}, succeeded: map[string]bool{}, refunds: map[string]int{}, answerSecret: testSecret}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *shop) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := Verify(testSecret, r.Header.Get(SignatureHeader), body, time.Now(), DefaultTolerance); err != nil {
		s.refused++
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	if s.status != 0 {
		w.WriteHeader(s.status)
		return
	}
	var req Request
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var a Answer
	switch req.Type {
	case "charge":
		if _, ok := s.charged[req.Key]; !ok {
			s.charged[req.Key] = req
		}
		a = Answer{Outcome: "pending", Ref: "pay_" + req.Key, NextURL: "https://pay.shop.example/checkout/" + req.Key}
	case "lookup":
		a = Answer{Outcome: "failed"}
		if s.succeeded[req.Key] {
			a = Answer{Outcome: "succeeded", Ref: "pay_" + req.Key}
		} else if _, ok := s.charged[req.Key]; ok {
			a = Answer{Outcome: "pending", Ref: "pay_" + req.Key}
		}
	case "refund":
		if !s.succeeded[req.Key] || req.Ref != "pay_"+req.Key || req.Amount != s.charged[req.Key].Amount {
			http.Error(w, "no such payment", http.StatusNotFound)
			return
		}
		s.refunds[req.Key]++
		a = Answer{Outcome: "refunded", Ref: "pay_" + req.Key}
	default:
		http.Error(w, "unknown type", http.StatusBadRequest)
		return
	}
	out, _ := json.Marshal(a)
	w.Header().Set(SignatureHeader, Sign(s.answerSecret, time.Now(), out))
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

func (s *shop) set(f func(s *shop)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

var usd = money.Price{Amount: 19900, Currency: "USD"}

func chargeReq(key string) orderbackend.ChargeRequest {
	return orderbackend.ChargeRequest{Key: key, Order: orderbackend.Order{ID: "o1", Activity: "phone", Title: "Phone"}, Amount: usd}
}

// TestProvider: a charge reaches the shop signed with the order's amount and answers pending with
// the page where the buyer pays; lookup follows the shop; a refund is asked with the charge's
// reference; a shop that answers unsigned, wrongly signed or with an error leaves the outcome
// unknown (an error), never a success.
func TestProvider(t *testing.T) {
	ctx := context.Background()
	s := newShop(t)
	p := New(s.srv.URL, testSecret, 0, nil, nil)
	res, err := p.Charge(ctx, chargeReq("o1-1"))
	if err != nil || res.Outcome != orderbackend.ChargePending || res.Ref != "pay_o1-1" || res.NextURL != "https://pay.shop.example/checkout/o1-1" {
		t.Fatalf("charge = %+v, %v", res, err)
	}
	if got := s.charged["o1-1"]; got.Amount != 19900 || got.Currency != "USD" || got.OrderID != "o1" || got.Activity != "phone" || got.Title != "Phone" {
		t.Errorf("the shop got %+v", got)
	}
	if res, err := p.Lookup(ctx, "o1-1"); err != nil || res.Outcome != orderbackend.ChargePending {
		t.Errorf("lookup before the buyer paid = %+v, %v", res, err)
	}
	if res, err := p.Lookup(ctx, "o9-1"); err != nil || res.Outcome != orderbackend.ChargeFailed {
		t.Errorf("lookup of nothing = %+v, %v", res, err)
	}
	s.set(func(s *shop) { s.succeeded["o1-1"] = true })
	if res, err := p.Lookup(ctx, "o1-1"); err != nil || res.Outcome != orderbackend.ChargeSucceeded || res.Ref != "pay_o1-1" {
		t.Errorf("lookup after the buyer paid = %+v, %v", res, err)
	}
	if err := p.Refund(ctx, "o1-1", "pay_o1-1", usd); err != nil || s.refunds["o1-1"] != 1 {
		t.Errorf("refund = %v, refunds %d", err, s.refunds["o1-1"])
	}
	if err := p.Refund(ctx, "o1-1", "pay_other", usd); err == nil {
		t.Error("a refund the shop refuses succeeded")
	}

	// The shop's answer signed with another secret, or an error status: unknown.
	s.set(func(s *shop) { s.answerSecret = []byte("fedcba9876543210") })
	if res, err := p.Lookup(ctx, "o1-1"); !errors.Is(err, ErrBadSignature) {
		t.Errorf("lookup answered with another secret = %+v, %v; want ErrBadSignature", res, err)
	}
	s.set(func(s *shop) { s.answerSecret, s.status = testSecret, http.StatusInternalServerError })
	if res, err := p.Charge(ctx, chargeReq("o1-2")); err == nil {
		t.Errorf("charge answered 500 = %+v", res)
	}
	s.set(func(s *shop) { s.status = 0 })
	// A provider with another secret is refused by the shop.
	if _, err := New(s.srv.URL, []byte("fedcba9876543210"), 0, nil, nil).Charge(ctx, chargeReq("o1-3")); err == nil || s.refused != 1 {
		t.Errorf("charge with another secret: %v, shop refused %d", err, s.refused)
	}
	if _, ok := s.charged["o1-3"]; ok {
		t.Error("the shop charged a request it could not verify")
	}
	// A shop that is not there.
	s.srv.Close()
	if _, err := p.Charge(ctx, chargeReq("o1-4")); err == nil {
		t.Error("charge without a shop succeeded")
	}
}

// TestParseNotification: a signed event within the tolerance is read; a bad or old signature or a
// body that is not an Event is refused.
func TestParseNotification(t *testing.T) {
	p := New("https://pay.shop.example", testSecret, 0, nil, nil)
	now := time.Now()
	head := func(body []byte, at time.Time) http.Header {
		return http.Header{SignatureHeader: {Sign(testSecret, at, body)}}
	}
	body := []byte(`{"id":"evt_1","key":"o1-1","outcome":"succeeded","ref":"pay_o1-1"}`)
	n, err := p.ParseNotification(head(body, now), body, now)
	if err != nil || n != (orderbackend.Notification{Provider: "webhook", EventID: "evt_1", Key: "o1-1", Outcome: orderbackend.ChargeSucceeded, Ref: "pay_o1-1"}) {
		t.Fatalf("parse = %+v, %v", n, err)
	}
	for name, c := range map[string]struct {
		h    http.Header
		body []byte
		want error
	}{
		"unsigned":      {http.Header{}, body, orderbackend.ErrBadSignature},
		"old":           {head(body, now.Add(-6*time.Minute)), body, orderbackend.ErrBadSignature},
		"changed":       {head(body, now), bytes.Replace(body, []byte("succeeded"), []byte("failed"), 1), orderbackend.ErrBadSignature},
		"unknown field": {head([]byte(`{"id":"e","key":"k","outcome":"succeeded","amount":1}`), now), []byte(`{"id":"e","key":"k","outcome":"succeeded","amount":1}`), orderbackend.ErrBadNotification},
		"two values":    {head([]byte(`{"id":"e"} {"id":"f"}`), now), []byte(`{"id":"e"} {"id":"f"}`), orderbackend.ErrBadNotification},
		"not json":      {head([]byte(`evt_1`), now), []byte(`evt_1`), orderbackend.ErrBadNotification},
	} {
		if n, err := p.ParseNotification(c.h, c.body, now); !errors.Is(err, c.want) {
			t.Errorf("%s = %+v, %v; want %v", name, n, err, c.want)
		}
	}
}
