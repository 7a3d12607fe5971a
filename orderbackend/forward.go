package orderbackend

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/caddy-seckill/caddy-seckill/forwardsig"
)

// ErrBadSignature: the Seckill-* headers are missing, malformed or not signed with the secret.
var ErrBadSignature = errors.New("bad forwarded-winner signature")

// VerifySignature is forwardsig.Verify for a service that branches on errors: it returns the win
// the Seckill-* headers of a forwarded winner carry, or ErrBadSignature, also when no secret is
// configured (an empty HMAC key would let anyone sign).
func VerifySignature(secret []byte, h http.Header) (forwardsig.Win, error) {
	if len(secret) == 0 {
		return forwardsig.Win{}, fmt.Errorf("%w: no secret configured", ErrBadSignature)
	}
	w, ok := forwardsig.Verify(h, secret)
	if !ok {
		return forwardsig.Win{}, ErrBadSignature
	}
	return w, nil
}
