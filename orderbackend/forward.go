package orderbackend

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/caddy-seckill/caddy-seckill/caddymodule/forwardsig"
)

// Headers of a winner's request that the edge forwards to a shop's own order API
// (`seckill { forward }` followed by reverse_proxy). The edge strips any client-sent Seckill-*
// header first, so these come from the edge alone.
const (
	HeaderReservation = forwardsig.HeaderReservation
	HeaderActivity    = forwardsig.HeaderActivity
	HeaderUser        = forwardsig.HeaderUser
	HeaderQty         = forwardsig.HeaderQty
	HeaderSignature   = forwardsig.HeaderSignature
)

// ErrBadSignature: the Seckill-* headers are missing, malformed or not signed with the secret.
var ErrBadSignature = errors.New("bad forwarded-winner signature")

// Forwarded is the win a forwarded request carries.
type Forwarded struct {
	Reservation string
	Activity    string
	User        string
	Qty         int64
}

// SignForwarded returns the Seckill-Signature of f under secret: lowercase hex of
// HMAC-SHA256(secret, m), where m is the netstring encoding ("<byte length>:<bytes>,") of "v1",
// the reservation id, the activity id, the user id and the decimal quantity, in that order. For
// reservation "r1", activity "a", user "u", qty 2, m is "2:v1,2:r1,1:a,1:u,1:2,".
//
// The edge signs with the same function (package caddymodule/forwardsig, which has no
// dependencies, so a shop's Go service can import it without Caddy).
func SignForwarded(secret []byte, f Forwarded) string {
	return forwardsig.Sign(secret, forwardsig.Win(f))
}

// VerifySignature reads the Seckill-* headers of a forwarded winner and returns the win if the
// signature verifies under secret (compared in constant time). A shop's order API calls it before
// trusting the headers; the reservation id is unique per win, so it is also the key that makes a
// repeated delivery of one winner harmless (insert ... on conflict do nothing).
func VerifySignature(secret []byte, h http.Header) (Forwarded, error) {
	if len(secret) == 0 {
		return Forwarded{}, fmt.Errorf("%w: no secret configured", ErrBadSignature)
	}
	w, ok := forwardsig.Verify(h, secret)
	if !ok {
		return Forwarded{}, ErrBadSignature
	}
	return Forwarded(w), nil
}
