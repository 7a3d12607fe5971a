package jwtauth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	josejwt "github.com/go-jose/go-jose/v4/jwt"
)

// These tests verify tokens minted, and key sets published, by go-jose: an implementation
// independent of golang-jwt, which this package builds on, so that a shared misreading of the
// RFCs would show.

// joseSign signs claims with go-jose; opts may add header members.
func joseSign(t *testing.T, alg jose.SignatureAlgorithm, key any, kid string, claims any, opts *jose.SignerOptions) string {
	t.Helper()
	if opts == nil {
		opts = &jose.SignerOptions{}
	}
	opts = opts.WithType("JWT")
	sk := jose.SigningKey{Algorithm: alg, Key: key}
	if kid != "" {
		sk.Key = jose.JSONWebKey{Key: key, KeyID: kid, Algorithm: string(alg)}
	}
	signer, err := jose.NewSigner(sk, opts)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := josejwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// joseClaims are alice's claims, valid for an hour, issued now.
func joseClaims() josejwt.Claims {
	now := time.Now()
	return josejwt.Claims{Subject: "alice", Expiry: josejwt.NewNumericDate(now.Add(time.Hour)), IssuedAt: josejwt.NewNumericDate(now)}
}

// joseKeys are a private key per algorithm, with its public half.
func joseKeys(t *testing.T) map[jose.SignatureAlgorithm][2]any {
	k := keys()
	ec521, err := ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rsa := [2]any{k.rsa, &k.rsa.PublicKey}
	return map[jose.SignatureAlgorithm][2]any{
		jose.HS256: {secret, nil}, jose.HS384: {[]byte(strings.Repeat("h", 48)), nil}, jose.HS512: {[]byte(strings.Repeat("h", 64)), nil},
		jose.RS256: rsa, jose.RS384: rsa, jose.RS512: rsa, jose.PS256: rsa, jose.PS384: rsa, jose.PS512: rsa,
		jose.ES256: {k.ec, &k.ec.PublicKey}, jose.ES384: {k.ec384, &k.ec384.PublicKey}, jose.ES512: {ec521, &ec521.PublicKey},
		jose.EdDSA: {k.ed, k.ed.Public()},
	}
}

func TestInteropGoJoseTokens(t *testing.T) {
	all := joseKeys(t)
	var published jose.JSONWebKeySet
	for alg, kp := range all {
		if kp[1] != nil {
			published.Keys = append(published.Keys, jose.JSONWebKey{Key: kp[1], KeyID: "kid-" + string(alg), Algorithm: string(alg), Use: "sig"})
		}
	}
	doc, err := json.Marshal(published) // go-jose's own JWKS encoding
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(doc) }))
	t.Cleanup(srv.Close)

	for alg, kp := range all {
		t.Run(string(alg), func(t *testing.T) {
			a := []string{string(alg)}
			var configs []Config
			if kp[1] == nil {
				configs = append(configs, Config{Algorithms: a, HMACSecret: kp[0].([]byte)})
			} else {
				configs = append(configs, Config{Algorithms: a, PublicKeyPEM: [][]byte{pemOf(t, kp[1])}}, Config{Algorithms: a, JWKSURL: srv.URL})
			}
			for i, cfg := range configs {
				v := mustNew(t, cfg)
				kid := ""
				if cfg.JWKSURL != "" {
					kid = "kid-" + string(alg)
				}
				good := joseSign(t, alg, kp[0], kid, joseClaims(), nil)
				if c, err := v.Verify(context.Background(), good); err != nil || c.User != "alice" {
					t.Errorf("config %d: a go-jose %s token: %+v, %v", i, alg, c, err)
				}
				// The same token with the signature of another token: refused.
				other := joseSign(t, alg, kp[0], kid, josejwt.Claims{Subject: "mallory", Expiry: josejwt.NewNumericDate(time.Now().Add(time.Hour))}, nil)
				forged := good[:strings.LastIndexByte(good, '.')] + other[strings.LastIndexByte(other, '.'):]
				if _, err := v.Verify(context.Background(), forged); !errors.Is(err, ErrUnauthorized) {
					t.Errorf("config %d: a forged %s token: %v", i, alg, err)
				}
			}
		})
	}
}

// TestInteropCriticalAndUnencoded: RFC 7515 §4.1.11 has a verifier refuse a token whose crit lists
// an extension it does not understand, and this package understands none; RFC 7797's unencoded
// payload (b64 false, which must be critical) is one of them. go-jose mints both.
func TestInteropCriticalAndUnencoded(t *testing.T) {
	hs := Config{Algorithms: []string{"HS256"}, HMACSecret: secret}
	v := mustNew(t, hs)
	ctx := context.Background()
	crit := joseSign(t, jose.HS256, secret, "", joseClaims(),
		(&jose.SignerOptions{}).WithCritical("exp-v2").WithHeader("exp-v2", 1))
	if _, err := v.Verify(ctx, crit); !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "critical extensions") {
		t.Errorf(`crit ["exp-v2"]: %v, want refused`, err)
	}

	// b64 false: the payload is the literal text, here one that looks like base64url claims. The
	// signature then equals that of an ordinary token, so only the header tells them apart.
	claimsJSON, err := json.Marshal(joseClaims())
	if err != nil {
		t.Fatal(err)
	}
	payload := base64.RawURLEncoding.EncodeToString(claimsJSON)
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: secret}, (&jose.SignerOptions{}).WithBase64(false))
	if err != nil {
		t.Fatal(err)
	}
	jws, err := signer.Sign([]byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	// go-jose writes the compact form of an unencoded payload detached ("header..signature");
	// the payload goes back in the middle as it is (RFC 7797 §5.2).
	detached, err := jws.DetachedCompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	head, sig, ok := strings.Cut(detached, "..")
	if !ok {
		t.Fatalf("go-jose's detached form %q", detached)
	}
	unencoded := head + "." + payload + "." + sig
	if _, err := jws.Verify(secret); err != nil {
		t.Fatalf("go-jose does not verify its own unencoded token: %v", err)
	}
	// golang-jwt, which ignores crit, accepts both: only the header makes them wrong.
	for _, tok := range []string{crit, unencoded} {
		if user, err := referenceVerify(hs, tok); err != nil || user != "alice" {
			t.Fatalf("golang-jwt refuses %q (%v): the test proves nothing", tok, err)
		}
	}
	if _, err := v.Verify(ctx, unencoded); !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "critical extensions") {
		t.Errorf(`b64 false, crit ["b64"]: %v, want refused`, err)
	}

	// Our own spellings of the same headers, signed correctly, among them b64 false without crit
	// (which RFC 7797 forbids) and an empty crit (which RFC 7515 forbids).
	later := time.Now().Add(time.Hour).Unix()
	body := `{"sub":"alice","exp":` + itoa(later) + `}`
	for _, c := range []struct {
		header string
		ok     bool
	}{
		{`{"alg":"HS256","crit":["exp-v2"],"exp-v2":1}`, false},
		{`{"alg":"HS256","crit":[]}`, false},
		{`{"alg":"HS256","crit":null}`, false},
		{`{"alg":"HS256","cr\u0069t":["x"]}`, false},
		{`{"alg":"HS256","b64":false}`, false},
		{`{"alg":"HS256","b64":"false"}`, false},
		{`{"alg":"HS256","b64":true}`, true},
		{`{"alg":"HS256","typ":"JWT"}`, true},
	} {
		tok := hmacToken(c.header, body)
		_, err := v.Verify(ctx, tok)
		if (err == nil) != c.ok {
			t.Errorf("header %s: %v, want accepted %v", c.header, err, c.ok)
		}
	}
}

// TestInteropIssuedAt: iat later than now + leeway is refused (the token claims to come from the
// future), within the leeway accepted.
func TestInteropIssuedAt(t *testing.T) {
	ctx := context.Background()
	at := func(d time.Duration) string {
		c := joseClaims()
		c.IssuedAt = josejwt.NewNumericDate(time.Now().Add(d))
		c.Expiry = josejwt.NewNumericDate(time.Now().Add(d + time.Hour))
		return joseSign(t, jose.HS256, secret, "", c, nil)
	}
	noLeeway := mustNew(t, Config{Algorithms: []string{"HS256"}, HMACSecret: secret})
	leeway := mustNew(t, Config{Algorithms: []string{"HS256"}, HMACSecret: secret, Leeway: time.Minute})
	for _, c := range []struct {
		name string
		v    *Verifier
		iat  time.Duration
		ok   bool
	}{
		{"ten years ahead", leeway, 10 * 365 * 24 * time.Hour, false},
		{"two minutes ahead, leeway 1m", leeway, 2 * time.Minute, false},
		{"ten seconds ahead, leeway 1m", leeway, 10 * time.Second, true},
		{"ten seconds ahead, no leeway", noLeeway, 10 * time.Second, false},
		{"a minute ago, no leeway", noLeeway, -time.Minute, true},
	} {
		_, err := c.v.Verify(ctx, at(c.iat))
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want accepted %v", c.name, err, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "before issued") {
			t.Errorf("%s: %v, want the reason iat", c.name, err)
		}
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// hmacToken signs a header and a payload, both given as JSON text, with HS256 under secret.
func hmacToken(header, payload string) string {
	enc := base64.RawURLEncoding.EncodeToString
	text := enc([]byte(header)) + "." + enc([]byte(payload))
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(text))
	return text + "." + enc(m.Sum(nil))
}
