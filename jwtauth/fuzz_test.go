package jwtauth

import (
	"context"
	"errors"
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
	}
	f.Add("")
	f.Add("a.b.c")
	f.Add("..")
	f.Add(strings.Repeat(".", 100))
	f.Add("eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSIsImV4cCI6OTk5OTk5OTk5OX0.")
	f.Add(sign(f, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "alice", "exp": "soon"}, ""))
	f.Add(sign(f, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": 1, "exp": exp}, ""))
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
