// Package forwardsig signs and verifies the Seckill-* headers with which the seckill handler
// forwards a winner's request to the next handler (for example a shop's order API behind
// reverse_proxy). It imports only the standard library, so the edge, the order backend and a
// shop's own Go service share it without importing Caddy.
//
// The signature is hex(HMAC-SHA256(secret, m)) where m is the netstring encoding of the version
// "v2", the reservation id, the activity id, the user id, the decimal quantity and the decimal
// Unix time in seconds at which the edge signed (the Seckill-Timestamp header), in this order: each
// field as its byte length in decimal, ':', the bytes, ','. For example reservation "r1", activity
// "a", user "u", qty 2 signed at 1700000000 sign "2:v2,2:r1,1:a,1:u,1:2,10:1700000000,".
//
// Verify refuses a signature whose timestamp is further than its window (DefaultWindow unless
// Within says otherwise) from the verifier's clock, in either direction, so a captured request
// cannot be replayed later. Within the window a replay still verifies: the shop must deduplicate by
// the reservation id (unique per win) and take the quantity from Seckill-Qty, never from the body.
package forwardsig

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"time"
)

// The headers a forwarded winner carries.
const (
	HeaderReservation = "Seckill-Reservation"
	HeaderActivity    = "Seckill-Activity"
	HeaderUser        = "Seckill-User"
	HeaderQty         = "Seckill-Qty"
	HeaderTimestamp   = "Seckill-Timestamp"
	HeaderSignature   = "Seckill-Signature"
)

// DefaultWindow is how far a signature's timestamp may be from the verifier's clock. The edge
// forwards at once, so the window only has to cover clock skew between hosts and a proxy's
// retries; 5 minutes is also Stripe's tolerance for its signed webhooks.
const DefaultWindow = 5 * time.Minute

// Win is what the headers carry.
type Win struct {
	Reservation string
	Activity    string
	User        string
	Qty         int64
}

// Sign returns the signature of w signed at the given time (whole seconds) under secret.
func Sign(secret []byte, w Win, at time.Time) string {
	m := hmac.New(sha256.New, secret)
	for _, f := range []string{"v2", w.Reservation, w.Activity, w.User,
		strconv.FormatInt(w.Qty, 10), strconv.FormatInt(at.Unix(), 10)} {
		_, _ = m.Write([]byte(strconv.Itoa(len(f)) + ":" + f + ","))
	}
	return hex.EncodeToString(m.Sum(nil))
}

// Set sets the headers of w, timestamp (now) and signature included, on h.
func Set(h http.Header, secret []byte, w Win) {
	setAt(h, secret, w, time.Now())
}

func setAt(h http.Header, secret []byte, w Win, at time.Time) {
	h.Set(HeaderReservation, w.Reservation)
	h.Set(HeaderActivity, w.Activity)
	h.Set(HeaderUser, w.User)
	h.Set(HeaderQty, strconv.FormatInt(w.Qty, 10))
	h.Set(HeaderTimestamp, strconv.FormatInt(at.Unix(), 10))
	h.Set(HeaderSignature, Sign(secret, w, at))
}

// An Option changes how Verify checks the timestamp.
type Option func(*verifyOptions)

type verifyOptions struct {
	window time.Duration
	now    func() time.Time
}

// Within sets the window Verify accepts a timestamp in (default DefaultWindow); a window of zero
// or less keeps the default.
func Within(window time.Duration) Option {
	return func(o *verifyOptions) {
		if window > 0 {
			o.window = window
		}
	}
}

// Clock sets the clock Verify compares the timestamp with (default time.Now).
func Clock(now func() time.Time) Option {
	return func(o *verifyOptions) {
		if now != nil {
			o.now = now
		}
	}
}

// Verify reads the headers from h and reports the win they carry if the signature verifies under
// secret (compared in constant time) and its timestamp is within the window of the clock.
func Verify(h http.Header, secret []byte, opts ...Option) (Win, bool) {
	o := verifyOptions{window: DefaultWindow, now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	qty, err := strconv.ParseInt(h.Get(HeaderQty), 10, 64)
	if err != nil || qty <= 0 {
		return Win{}, false
	}
	ts, err := strconv.ParseInt(h.Get(HeaderTimestamp), 10, 64)
	if err != nil || ts <= 0 {
		return Win{}, false
	}
	at := time.Unix(ts, 0)
	if age := o.now().Sub(at); age > o.window || age < -o.window {
		return Win{}, false
	}
	w := Win{
		Reservation: h.Get(HeaderReservation),
		Activity:    h.Get(HeaderActivity),
		User:        h.Get(HeaderUser),
		Qty:         qty,
	}
	if w.Reservation == "" || w.Activity == "" || w.User == "" {
		return Win{}, false
	}
	got, err := hex.DecodeString(h.Get(HeaderSignature))
	if err != nil {
		return Win{}, false
	}
	want, _ := hex.DecodeString(Sign(secret, w, at))
	if !hmac.Equal(got, want) {
		return Win{}, false
	}
	return w, true
}
