// Package forwardsig signs and verifies the Seckill-* headers with which the seckill handler
// forwards a winner's request to the next handler (for example a shop's order API behind
// reverse_proxy). It imports only the standard library, so the edge, the order backend and a
// shop's own Go service share it without importing Caddy.
//
// The signature is hex(HMAC-SHA256(secret, m)) where m is the netstring encoding of the version
// "v1", the reservation id, the activity id, the user id and the decimal quantity, in this order:
// each field as its byte length in decimal, ':', the bytes, ','. For example reservation "r1",
// activity "a", user "u", qty 2 sign "2:v1,2:r1,1:a,1:u,1:2,".
package forwardsig

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
)

// The headers a forwarded winner carries.
const (
	HeaderReservation = "Seckill-Reservation"
	HeaderActivity    = "Seckill-Activity"
	HeaderUser        = "Seckill-User"
	HeaderQty         = "Seckill-Qty"
	HeaderSignature   = "Seckill-Signature"
)

// Win is what the headers carry.
type Win struct {
	Reservation string
	Activity    string
	User        string
	Qty         int64
}

// Sign returns the signature of w under secret.
func Sign(secret []byte, w Win) string {
	m := hmac.New(sha256.New, secret)
	for _, f := range []string{"v1", w.Reservation, w.Activity, w.User, strconv.FormatInt(w.Qty, 10)} {
		_, _ = m.Write([]byte(strconv.Itoa(len(f)) + ":" + f + ","))
	}
	return hex.EncodeToString(m.Sum(nil))
}

// Set sets the headers of w, signature included, on h.
func Set(h http.Header, secret []byte, w Win) {
	h.Set(HeaderReservation, w.Reservation)
	h.Set(HeaderActivity, w.Activity)
	h.Set(HeaderUser, w.User)
	h.Set(HeaderQty, strconv.FormatInt(w.Qty, 10))
	h.Set(HeaderSignature, Sign(secret, w))
}

// Verify reads the headers from h and reports the win they carry if the signature verifies under
// secret (compared in constant time).
func Verify(h http.Header, secret []byte) (Win, bool) {
	qty, err := strconv.ParseInt(h.Get(HeaderQty), 10, 64)
	if err != nil || qty <= 0 {
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
	want, _ := hex.DecodeString(Sign(secret, w))
	if !hmac.Equal(got, want) {
		return Win{}, false
	}
	return w, true
}
