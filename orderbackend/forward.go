package orderbackend

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/caddy-seckill/caddy-seckill/forwardsig"
)

// ErrBadSignature: a signature that is missing, malformed or not made with the secret: a forwarded
// winner's Seckill-* headers (VerifySignature) or a payment provider's notification (notify.go).
// Wrapping errors say which.
var ErrBadSignature = errors.New("bad signature")

// VerifySignature is forwardsig.Verify for a service that branches on errors: it returns the win
// the Seckill-* headers of a forwarded winner carry, or ErrBadSignature, also when no secret is
// configured (an empty HMAC key would let anyone sign).
func VerifySignature(secret []byte, h http.Header) (forwardsig.Win, error) {
	if len(secret) == 0 {
		return forwardsig.Win{}, fmt.Errorf("%w: forwarded winner: no secret configured", ErrBadSignature)
	}
	w, ok := forwardsig.Verify(h, secret)
	if !ok {
		return forwardsig.Win{}, fmt.Errorf("%w: forwarded winner's Seckill-* headers", ErrBadSignature)
	}
	return w, nil
}
