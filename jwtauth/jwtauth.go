// Package jwtauth verifies the bearer tokens of buyers: JSON Web Tokens whose algorithms are pinned
// by configuration (never taken from the token), whose expiry is required, checked against an HMAC
// secret, PEM public keys or a JWKS endpoint. It does not depend on Caddy, so the order backend
// uses it too.
package jwtauth

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// ErrUnauthorized is wrapped by every verification failure; the rest of the message is a reason a
// log may show (it never contains the token).
var ErrUnauthorized = errors.New("unauthorized")

// Bounds on what a client may send. MaxUserLen matches admission.MaxUserIDLen: a user id longer
// than that could never buy anyway.
const (
	MaxTokenLen = 8 << 10
	MaxUserLen  = 256
	maxKIDLen   = 256
)

func unauthorized(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnauthorized, fmt.Sprintf(format, args...))
}

// TokenFromRequest returns the token of an "Authorization: Bearer <token>" header. A missing,
// repeated, non-Bearer or longer than MaxTokenLen header is an error wrapping ErrUnauthorized.
func TokenFromRequest(r *http.Request) (string, error) {
	vals := r.Header.Values("Authorization")
	switch {
	case len(vals) == 0:
		return "", unauthorized("no bearer token")
	case len(vals) > 1:
		return "", unauthorized("more than one Authorization header")
	case len(vals[0]) > MaxTokenLen+len("Bearer "):
		return "", unauthorized("bearer token longer than %d bytes", MaxTokenLen)
	}
	scheme, token, _ := strings.Cut(vals[0], " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", unauthorized("authorization scheme is not Bearer")
	}
	token = strings.TrimSpace(token)
	if token == "" {
		return "", unauthorized("empty bearer token")
	}
	return token, nil
}
