package jwtauth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

var secret = []byte("test-secret-test-secret-32-bytes")

// testKeys are generated once per test binary: RSA generation is slow under the race detector.
type testKeys struct {
	rsa, rsa2 *rsa.PrivateKey
	ec        *ecdsa.PrivateKey
	ec384     *ecdsa.PrivateKey
	ed        ed25519.PrivateKey
}

var keys = sync.OnceValue(func() testKeys {
	must := func(err error) {
		if err != nil {
			panic(err)
		}
	}
	var k testKeys
	var err error
	k.rsa, err = rsa.GenerateKey(rand.Reader, 2048)
	must(err)
	k.rsa2, err = rsa.GenerateKey(rand.Reader, 2048)
	must(err)
	k.ec, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	k.ec384, err = ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	must(err)
	_, k.ed, err = ed25519.GenerateKey(rand.Reader)
	must(err)
	return k
})

// pemOf encodes a public key as a PKIX "PUBLIC KEY" PEM block.
func pemOf(t testing.TB, pub crypto.PublicKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// claims returns valid claims for alice expiring in an hour, with overrides applied (a nil value
// deletes the claim).
func claims(over map[string]any) jwt.MapClaims {
	c := jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix()}
	for k, v := range over {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	return c
}

// sign makes a token with method and key; kid is set in the header when not empty.
func sign(t testing.TB, m jwt.SigningMethod, key any, c jwt.MapClaims, kid string) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func x509MarshalPKCS8(k any) ([]byte, error) { return x509.MarshalPKCS8PrivateKey(k) }

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func must[T any](t testing.TB, f func() (T, error)) T {
	t.Helper()
	v, err := f()
	if err != nil {
		t.Fatal(err)
	}
	return v
}
