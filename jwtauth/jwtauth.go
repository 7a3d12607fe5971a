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

// TokenFromRequest returns the token of an "Authorization: Bearer <token>" header (RFC 6750 §2.1:
// the scheme in any case, one or more spaces, a b64token). A missing, repeated, non-Bearer, longer
// than MaxTokenLen or malformed header is an error wrapping ErrUnauthorized.
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
	// Surrounding whitespace is not part of a field value (RFC 9110 §5.5); net/http's server
	// already trims it, but a request built in-process may still carry it.
	scheme, token, _ := strings.Cut(strings.Trim(vals[0], " \t"), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", unauthorized("authorization scheme is not Bearer")
	}
	token = strings.TrimLeft(token, " ")
	if token == "" {
		return "", unauthorized("empty bearer token")
	}
	// The header's own syntax (RFC 6750). Verify checks the stricter JWS alphabet again
	// (compactJWS), which is what keeps a token with CR or LF inserted from verifying; this scan
	// is kept so that TokenFromRequest promises a b64token to any caller, at one pass over a few
	// hundred bytes.
	if !b64token(token) {
		return "", unauthorized("bearer token is not a b64token")
	}
	return token, nil
}

// b64token reports whether s is a b64token (RFC 6750 §2.1):
// 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=".
func b64token(s string) bool {
	i := 0
	for i < len(s) && b64tokenByte[s[i]] {
		i++
	}
	if i == 0 {
		return false
	}
	for ; i < len(s); i++ {
		if s[i] != '=' {
			return false
		}
	}
	return true
}

// b64tokenByte marks the bytes a b64token is made of before its padding.
var b64tokenByte = byteSet("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/")
