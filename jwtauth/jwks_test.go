package jwtauth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// jwksServer serves a mutable key set and counts the requests.
type jwksServer struct {
	*httptest.Server
	mu      sync.Mutex
	keys    []map[string]string
	failing bool
	hits    atomic.Int64
}

func newJWKSServer(t *testing.T, keys ...map[string]string) *jwksServer {
	s := &jwksServer{keys: keys}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.failing {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"keys": s.keys})
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) set(keys ...map[string]string) {
	s.mu.Lock()
	s.keys = keys
	s.mu.Unlock()
}

func (s *jwksServer) fail(f bool) {
	s.mu.Lock()
	s.failing = f
	s.mu.Unlock()
}

// toJWK publishes a public key as a JSON Web Key.
func toJWK(kid string, pub crypto.PublicKey) map[string]string {
	enc := base64.RawURLEncoding.EncodeToString
	switch k := pub.(type) {
	case *rsa.PublicKey:
		return map[string]string{"kty": "RSA", "kid": kid, "use": "sig", "n": enc(k.N.Bytes()), "e": enc(big.NewInt(int64(k.E)).Bytes())}
	case *ecdsa.PublicKey:
		size := (k.Curve.Params().BitSize + 7) / 8
		raw, err := k.Bytes() // 0x04 || X || Y
		if err != nil {
			panic(err)
		}
		return map[string]string{"kty": "EC", "kid": kid, "crv": k.Curve.Params().Name,
			"x": enc(raw[1 : 1+size]), "y": enc(raw[1+size:])}
	case ed25519.PublicKey:
		return map[string]string{"kty": "OKP", "kid": kid, "crv": "Ed25519", "x": enc(k)}
	}
	panic("unsupported key")
}

func TestJWKSKeyTypes(t *testing.T) {
	k := keys()
	srv := newJWKSServer(t,
		toJWK("rsa", &k.rsa.PublicKey), toJWK("ec", &k.ec.PublicKey), toJWK("ed", k.ed.Public()),
		map[string]string{"kty": "RSA", "kid": "enc", "use": "enc", "n": "AQAB", "e": "AQAB"}, // skipped: encryption key
		map[string]string{"kty": "oct", "kid": "sym", "k": "c2VjcmV0"},                        // skipped: symmetric
	)
	v := mustNew(t, Config{Algorithms: []string{"RS256", "ES256", "EdDSA"}, JWKSURL: srv.URL})
	for _, tok := range []string{
		sign(t, jwt.SigningMethodRS256, k.rsa, claims(nil), "rsa"),
		sign(t, jwt.SigningMethodES256, k.ec, claims(nil), "ec"),
		sign(t, jwt.SigningMethodEdDSA, k.ed, claims(nil), "ed"),
		sign(t, jwt.SigningMethodEdDSA, k.ed, claims(nil), ""), // no kid: every fitting key is tried
	} {
		if _, err := v.Verify(context.Background(), tok); err != nil {
			t.Error(err)
		}
	}
	// A kid naming a key of another family does not lend that key to the token.
	if _, err := v.Verify(context.Background(), sign(t, jwt.SigningMethodES256, k.ec, claims(nil), "rsa")); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("ES256 token with an RSA key's kid: %v", err)
	}
	if n := srv.hits.Load(); n != 1 {
		t.Errorf("%d fetches, want 1 (known kids need no refresh)", n)
	}
}

func TestJWKSRotation(t *testing.T) {
	k := keys()
	srv := newJWKSServer(t, toJWK("k1", &k.rsa.PublicKey))
	v := mustNew(t, Config{Algorithms: []string{"RS256"}, JWKSURL: srv.URL, JWKSMinRefresh: time.Hour})
	ctx := context.Background()
	if n := srv.hits.Load(); n != 1 {
		t.Fatalf("%d fetches at start, want 1", n)
	}
	if _, err := v.Verify(ctx, sign(t, jwt.SigningMethodRS256, k.rsa, claims(nil), "k1")); err != nil {
		t.Fatal(err)
	}
	// The first refresh is within the minimum interval of the start-up fetch: wait it out by
	// pretending the start-up fetch is old.
	v.jwks.mu.Lock()
	v.jwks.lastAttempt = time.Time{}
	v.jwks.mu.Unlock()

	// The issuer rotates: k2 appears. Twenty concurrent tokens with the new kid cause one fetch.
	srv.set(toJWK("k1", &k.rsa.PublicKey), toJWK("k2", &k.rsa2.PublicKey))
	tok2 := sign(t, jwt.SigningMethodRS256, k.rsa2, claims(nil), "k2")
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := v.Verify(ctx, tok2); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := srv.hits.Load(); n != 2 {
		t.Fatalf("%d fetches after an unknown kid, want 2", n)
	}

	// More unknown kids within JWKSMinRefresh: no fetch, and they fail.
	for i := 0; i < 5; i++ {
		_, err := v.Verify(ctx, sign(t, jwt.SigningMethodRS256, k.rsa, claims(nil), "k3"))
		if err != nil && !errors.Is(err, ErrUnauthorized) {
			t.Fatal(err)
		}
	}
	if n := srv.hits.Load(); n != 2 {
		t.Errorf("%d fetches, want still 2: refreshes are rate-limited", n)
	}
}

func TestJWKSKeepsLastGoodSet(t *testing.T) {
	k := keys()
	srv := newJWKSServer(t, toJWK("k1", &k.rsa.PublicKey))
	v := mustNew(t, Config{Algorithms: []string{"RS256"}, JWKSURL: srv.URL, JWKSMinRefresh: time.Millisecond})
	ctx := context.Background()
	tok1 := sign(t, jwt.SigningMethodRS256, k.rsa, claims(nil), "k1")
	unknown := sign(t, jwt.SigningMethodRS256, k.rsa2, claims(nil), "k9")

	srv.fail(true)
	time.Sleep(2 * time.Millisecond)
	if _, err := v.Verify(ctx, unknown); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("unknown kid while the server fails: %v", err)
	}
	if n := srv.hits.Load(); n != 2 {
		t.Fatalf("%d fetches, want 2 (the start and one refresh)", n)
	}
	if n := v.JWKSRefreshFailures(); n != 1 {
		t.Errorf("JWKSRefreshFailures = %d after one failed refresh, want 1", n)
	}
	if _, err := v.Verify(ctx, tok1); err != nil {
		t.Errorf("known kid after a failed refresh: %v", err)
	}

	// A document with no usable key is a failure too, not an empty set.
	srv.fail(false)
	srv.set(map[string]string{"kty": "RSA", "kid": "bad", "n": "AQAB", "e": "AQAB"})
	time.Sleep(2 * time.Millisecond)
	if _, err := v.Verify(ctx, unknown); !errors.Is(err, ErrUnauthorized) {
		t.Fatal(err)
	}
	if n := srv.hits.Load(); n != 3 {
		t.Fatalf("%d fetches, want 3", n)
	}
	if v.jwks.lastErr == nil || !strings.Contains(v.jwks.lastErr.Error(), "no usable signature key") {
		t.Errorf("last refresh error %v", v.jwks.lastErr)
	}
	if _, err := v.Verify(ctx, tok1); err != nil {
		t.Errorf("known kid after a useless document: %v", err)
	}
	if n := v.JWKSRefreshFailures(); n != 2 {
		t.Errorf("JWKSRefreshFailures = %d after two failed refreshes, want 2", n)
	}
	// A good refresh does not reset the count: it is a counter.
	srv.set(toJWK("k9", &k.rsa2.PublicKey))
	time.Sleep(2 * time.Millisecond)
	if _, err := v.Verify(ctx, unknown); err != nil {
		t.Fatalf("rotated key after the server recovered: %v", err)
	}
	if n := v.JWKSRefreshFailures(); n != 2 {
		t.Errorf("JWKSRefreshFailures = %d after a good refresh, want still 2", n)
	}
	if n := mustNew(t, Config{Algorithms: []string{"HS256"}, HMACSecret: []byte("0123456789abcdef0123456789abcdef")}).JWKSRefreshFailures(); n != 0 {
		t.Errorf("JWKSRefreshFailures without a JWKS URL = %d", n)
	}
}

func TestJWKSMaxAge(t *testing.T) {
	k := keys()
	srv := newJWKSServer(t, toJWK("k1", &k.rsa.PublicKey))
	v := mustNew(t, Config{Algorithms: []string{"RS256"}, JWKSURL: srv.URL, JWKSMinRefresh: time.Millisecond, JWKSMaxAge: 20 * time.Millisecond})
	tok1 := sign(t, jwt.SigningMethodRS256, k.rsa, claims(nil), "k1")
	// k1 is revoked: once the set is older than JWKSMaxAge, the next verification refetches it.
	srv.set(toJWK("k2", &k.rsa2.PublicKey))
	time.Sleep(30 * time.Millisecond)
	if _, err := v.Verify(context.Background(), tok1); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("a token of a revoked key: %v", err)
	}
}

func TestJWKSStartFails(t *testing.T) {
	srv := newJWKSServer(t)
	srv.fail(true)
	if _, err := New(Config{Algorithms: []string{"RS256"}, JWKSURL: srv.URL}); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("New with a failing JWKS: %v", err)
	}
	srv.fail(false)
	if _, err := New(Config{Algorithms: []string{"RS256"}, JWKSURL: srv.URL}); err == nil || !strings.Contains(err.Error(), "no usable signature key") {
		t.Errorf("New with an empty JWKS: %v", err)
	}
}

// TestJWKSMinRefreshDefault: without JWKSMinRefresh, tokens with unknown kids cause no fetch in
// the 30 s after the last one; with it, one per period.
func TestJWKSMinRefreshDefault(t *testing.T) {
	k := keys()
	srv := newJWKSServer(t, toJWK("k1", &k.rsa.PublicKey))
	v := mustNew(t, Config{Algorithms: []string{"RS256"}, JWKSURL: srv.URL})
	if v.jwks.minRefresh != DefaultJWKSMinRefresh || DefaultJWKSMinRefresh != 30*time.Second {
		t.Fatalf("min refresh %v, default %v; the documentation says 30s", v.jwks.minRefresh, DefaultJWKSMinRefresh)
	}
	srv.set(toJWK("k1", &k.rsa.PublicKey), toJWK("k2", &k.rsa2.PublicKey))
	for range 20 {
		if _, err := v.Verify(context.Background(), sign(t, jwt.SigningMethodRS256, k.rsa2, claims(nil), "k2")); !errors.Is(err, ErrUnauthorized) {
			t.Fatalf("k2 before the refresh floor passed: %v", err)
		}
	}
	if n := srv.hits.Load(); n != 1 {
		t.Errorf("%d fetches, want 1: the start's fetch covers the next 30 s", n)
	}
	if _, err := New(Config{Algorithms: []string{"RS256"}, JWKSURL: srv.URL, JWKSMinRefresh: -time.Second}); err == nil {
		t.Error("a negative JWKSMinRefresh is accepted")
	}
}

// TestJWKSRefreshFailureLogged: a failed refresh is a warning naming the endpoint and the error.
func TestJWKSRefreshFailureLogged(t *testing.T) {
	k := keys()
	srv := newJWKSServer(t, toJWK("k1", &k.rsa.PublicKey))
	core, logs := observer.New(zap.WarnLevel)
	v := mustNew(t, Config{Algorithms: []string{"RS256"}, JWKSURL: srv.URL, JWKSMinRefresh: time.Millisecond, Logger: zap.New(core)})
	srv.fail(true)
	time.Sleep(5 * time.Millisecond)
	if _, err := v.Verify(context.Background(), sign(t, jwt.SigningMethodRS256, k.rsa2, claims(nil), "k9")); !errors.Is(err, ErrUnauthorized) {
		t.Fatal(err)
	}
	entries := logs.FilterMessageSnippet("refreshing the JWKS failed").All()
	if len(entries) != 1 {
		t.Fatalf("%d warnings, want 1: %v", len(entries), logs.All())
	}
	f := entries[0].ContextMap()
	if f["url"] != srv.URL || !strings.Contains(fmt.Sprint(f["error"]), "503") {
		t.Errorf("warning fields %v, want the url and the 503", f)
	}
	// A refresh that works again logs nothing more.
	srv.fail(false)
	srv.set(toJWK("k1", &k.rsa.PublicKey), toJWK("k9", &k.rsa2.PublicKey))
	time.Sleep(5 * time.Millisecond)
	if _, err := v.Verify(context.Background(), sign(t, jwt.SigningMethodRS256, k.rsa2, claims(nil), "k9")); err != nil {
		t.Fatal(err)
	}
	if n := logs.Len(); n != 1 {
		t.Errorf("%d log entries, want still 1", n)
	}
}
