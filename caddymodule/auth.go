package caddymodule

import (
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/jwtauth"
)

// authenticate verifies the bearer token and sets the caller's user id. A token that does not
// verify is a 401, also while a JWKS endpoint is down (the verifier keeps its last good key set,
// and every refusal of Verify wraps jwtauth.ErrUnauthorized); any other error, which Verify does
// not return today, would be a 503.
func (q *request) authenticate() *Error {
	tok, err := jwtauth.TokenFromRequest(q.r)
	if err != nil {
		return errUnauthorized("a bearer token is required")
	}
	claims, err := q.h.app.verifier.Verify(q.r.Context(), tok)
	if err != nil {
		if !errors.Is(err, jwtauth.ErrUnauthorized) {
			q.h.logger.Warn("verifying a token failed", zap.Error(err))
			return errBusyAt(layerJWT, time.Second)
		}
		q.h.logger.Debug("token refused", zap.Error(err))
		return errUnauthorized("the bearer token is not valid")
	}
	if !usableUser(claims.User) {
		return errUnauthorized("the bearer token names no usable user")
	}
	q.user = claims.User // and {http.seckill.user} with it
	q.claims = claims    // for {http.seckill.claims.*}
	return nil
}

// usableUser accepts a user id the store and the forwarded headers can carry: 1 to
// admission.MaxUserIDLen bytes without control characters, nor a space at either end, which
// HTTP strips from a header value: a forwarded Seckill-User would no longer match its signature.
func usableUser(u string) bool {
	if u == "" || len(u) > admission.MaxUserIDLen || u[0] == ' ' || u[len(u)-1] == ' ' {
		return false
	}
	for i := 0; i < len(u); i++ {
		if u[i] < 0x20 || u[i] == 0x7f {
			return false
		}
	}
	return true
}
