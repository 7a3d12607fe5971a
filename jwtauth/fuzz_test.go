package jwtauth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// FuzzVerify feeds arbitrary tokens to a verifier that accepts HS256 and RS256: it must never
// panic, every failure must wrap ErrUnauthorized, and nothing but the one validly signed token
// may pass.
func FuzzVerify(f *testing.F) {
	k := keys()
	v, err := New(Config{Algorithms: []string{"HS256", "RS256"}, HMACSecret: secret, PublicKeyPEM: [][]byte{pemOf(f, &k.rsa.PublicKey)}})
	if err != nil {
		f.Fatal(err)
	}
	// A fixed exp keeps the HS256 seed identical in the fuzzing workers, which run this function
	// again (the RSA key, and so the RS256 seed, differs per process).
	exp := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	good := map[string]bool{
		sign(f, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "alice", "exp": exp}, ""):   true,
		sign(f, jwt.SigningMethodRS256, k.rsa, jwt.MapClaims{"sub": "alice", "exp": exp}, "kid"): true,
	}
	for tok := range good {
		f.Add(tok)
		f.Add(tok + "=")
		f.Add(strings.ToUpper(tok))
		f.Add(tok[:len(tok)-1])
		// Base64 decoders skip line breaks: these must not verify as the same token.
		dot := strings.IndexByte(tok, '.')
		f.Add(tok[:dot] + ".\n" + tok[dot+1:])
		f.Add(tok + "\r\n")
	}
	f.Add("")
	f.Add("a.b.c")
	f.Add("..")
	f.Add(strings.Repeat(".", 100))
	f.Add("eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSIsImV4cCI6OTk5OTk5OTk5OX0.")
	f.Add(sign(f, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "alice", "exp": "soon"}, ""))
	f.Add(sign(f, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": 1, "exp": exp}, ""))
	// Signed, but with a critical extension, an unencoded payload, or issued in the future.
	claimsText := fmt.Sprintf(`{"sub":"alice","exp":%d}`, exp)
	f.Add(hmacToken(`{"alg":"HS256","crit":["exp-v2"],"exp-v2":1}`, claimsText))
	f.Add(hmacToken(`{"alg":"HS256","b64":false,"crit":["b64"]}`, claimsText))
	f.Add(hmacToken(`{"alg":"HS256"}`, fmt.Sprintf(`{"sub":"alice","exp":%d,"iat":%d}`, exp, exp-1)))
	f.Fuzz(func(t *testing.T, tok string) {
		c, err := v.Verify(context.Background(), tok)
		if err != nil {
			if !errors.Is(err, ErrUnauthorized) {
				t.Fatalf("error %v does not wrap ErrUnauthorized", err)
			}
			return
		}
		if !good[tok] || c.User != "alice" {
			t.Fatalf("token %q verified as %+v", tok, c)
		}
	})
}

// FuzzTokenFromRequest feeds arbitrary Authorization headers (none, one or two of them) to
// TokenFromRequest and the token it extracts to a verifier with a known HMAC secret. Extraction
// must never panic; a refusal must wrap ErrUnauthorized; a token it returns must be the header,
// trimmed, without the Bearer scheme and the spaces after it, and be a b64token of RFC 6750 (no
// whitespace, nothing else a JWT cannot hold); and the pair must accept nothing but the one token
// the test signed.
func FuzzTokenFromRequest(f *testing.F) {
	v, err := New(Config{Algorithms: []string{"HS256"}, HMACSecret: secret})
	if err != nil {
		f.Fatal(err)
	}
	exp := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	good := sign(f, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "alice", "exp": exp}, "")
	dot := strings.LastIndexByte(good, '.')
	for _, h := range []string{
		"Bearer " + good,
		"bearer " + good,
		"BEARER " + good,
		"BeArEr " + good,
		"Bearer   " + good,
		"Bearer " + good + "  ",
		"Bearer\t" + good,
		"Bearer" + good,
		" Bearer " + good,
		"Bearer " + good + "\t",
		"Bearer " + good + " x",
		"Bearer Bearer " + good,
		"Bearer " + good[:dot] + ".\n" + good[dot+1:],
		"Bearer " + good[:dot+3] + "\r\n" + good[dot+3:],
		"Bearer " + good + "=",
		"Bearer " + good + ", Bearer " + good,
		"Basic " + good,
		"Token " + good,
		"Bearer ",
		"Bearer",
		"Bearer \u00a0" + good,
		"Bearer " + good + "\u2003",
		"",
		" ",
		"Bearer " + strings.Repeat("a", MaxTokenLen),
		"Bearer " + strings.Repeat("a", MaxTokenLen+1),
		"Bearer  " + strings.Repeat("a", MaxTokenLen),
	} {
		f.Add(h, "", uint8(1))
	}
	f.Add("Bearer "+good, "Bearer "+good, uint8(2))
	f.Add("Bearer "+good, "", uint8(2))
	f.Add("", "", uint8(0))
	f.Fuzz(func(t *testing.T, first, second string, n uint8) {
		vals := []string{first, second}[:n%3]
		r := &http.Request{Header: http.Header{}}
		for _, h := range vals {
			r.Header.Add("Authorization", h)
		}
		tok, err := TokenFromRequest(r)
		if err != nil {
			if !errors.Is(err, ErrUnauthorized) {
				t.Fatalf("error %v does not wrap ErrUnauthorized", err)
			}
			return
		}
		if len(vals) != 1 {
			t.Fatalf("token %q extracted from %d Authorization headers", tok, len(vals))
		}
		if tok == "" || len(tok) > MaxTokenLen {
			t.Fatalf("token of %d bytes extracted from %q", len(tok), vals[0])
		}
		if !rfc6750Token(tok) {
			t.Fatalf("token %q extracted from %q is not a b64token", tok, vals[0])
		}
		scheme, ok := strings.CutSuffix(strings.Trim(vals[0], " \t"), tok)
		if !ok || !strings.EqualFold(strings.TrimRight(scheme, " "), "Bearer") || !strings.HasSuffix(scheme, " ") {
			t.Fatalf("token %q is not what follows the Bearer scheme in %q", tok, vals[0])
		}
		c, err := v.Verify(context.Background(), tok)
		if err != nil {
			if !errors.Is(err, ErrUnauthorized) {
				t.Fatalf("error %v does not wrap ErrUnauthorized", err)
			}
			return
		}
		if tok != good || c.User != "alice" {
			t.Fatalf("header %q gave token %q, accepted as %+v; only %q was signed", vals[0], tok, c, good)
		}
	})
}

// rfc6750Token reports whether s is a b64token of RFC 6750 §2.1, written here independently of
// the package: 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=".
func rfc6750Token(s string) bool {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/"
	body := strings.TrimRight(s, "=")
	return body != "" && strings.Trim(body, alphabet) == ""
}
