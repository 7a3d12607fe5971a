package jwtauth

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func mustNew(t *testing.T, cfg Config) *Verifier {
	t.Helper()
	v, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return v
}

func TestGoodTokens(t *testing.T) {
	k := keys()
	cases := []struct {
		name string
		cfg  Config
		tok  string
	}{
		{"HS256", Config{Algorithms: []string{"HS256"}, HMACSecret: secret},
			sign(t, jwt.SigningMethodHS256, secret, claims(nil), "")},
		{"RS256", Config{Algorithms: []string{"RS256"}, PublicKeyPEM: [][]byte{pemOf(t, &k.rsa.PublicKey)}},
			sign(t, jwt.SigningMethodRS256, k.rsa, claims(nil), "")},
		{"PS256", Config{Algorithms: []string{"PS256"}, PublicKeyPEM: [][]byte{pemOf(t, &k.rsa.PublicKey)}},
			sign(t, jwt.SigningMethodPS256, k.rsa, claims(nil), "")},
		{"ES256", Config{Algorithms: []string{"ES256"}, PublicKeyPEM: [][]byte{pemOf(t, &k.ec.PublicKey)}},
			sign(t, jwt.SigningMethodES256, k.ec, claims(nil), "")},
		{"EdDSA", Config{Algorithms: []string{"EdDSA"}, PublicKeyPEM: [][]byte{pemOf(t, k.ed.Public())}},
			sign(t, jwt.SigningMethodEdDSA, k.ed, claims(nil), "")},
		{"RS256 among several keys", Config{Algorithms: []string{"RS256", "ES256", "HS256"}, HMACSecret: secret,
			PublicKeyPEM: [][]byte{pemOf(t, &k.rsa2.PublicKey), append(pemOf(t, &k.ec.PublicKey), pemOf(t, &k.rsa.PublicKey)...)}},
			sign(t, jwt.SigningMethodRS256, k.rsa, claims(nil), "")},
		{"custom user claim", Config{Algorithms: []string{"HS256"}, HMACSecret: secret, UserClaim: "uid"},
			sign(t, jwt.SigningMethodHS256, secret, claims(map[string]any{"uid": "bob", "sub": nil}), "")},
		{"issuer and audience", Config{Algorithms: []string{"HS256"}, HMACSecret: secret, Issuer: "shop", Audience: "seckill"},
			sign(t, jwt.SigningMethodHS256, secret, claims(map[string]any{"iss": "shop", "aud": []string{"other", "seckill"}}), "")},
		{"leeway", Config{Algorithms: []string{"HS256"}, HMACSecret: secret, Leeway: time.Minute},
			sign(t, jwt.SigningMethodHS256, secret, claims(map[string]any{"exp": time.Now().Add(-10 * time.Second).Unix()}), "")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl, err := mustNew(t, c.cfg).Verify(context.Background(), c.tok)
			if err != nil {
				t.Fatal(err)
			}
			want := "alice"
			if c.cfg.UserClaim == "uid" {
				want = "bob"
			}
			if m, err := cl.Map(); cl.User != want || err != nil || m["exp"] == nil || cl.ExpiresAt.IsZero() {
				t.Errorf("claims %+v, want user %s with raw claims and expiry", cl, want)
			}
		})
	}
}

func TestBadTokens(t *testing.T) {
	k := keys()
	rsaPEM := pemOf(t, &k.rsa.PublicKey)
	hs := Config{Algorithms: []string{"HS256"}, HMACSecret: secret}
	rs := Config{Algorithms: []string{"RS256"}, PublicKeyPEM: [][]byte{rsaPEM}}
	both := Config{Algorithms: []string{"HS256", "RS256"}, HMACSecret: secret, PublicKeyPEM: [][]byte{rsaPEM}}
	long := []byte(strings.Repeat("s", 64))
	hs512 := Config{Algorithms: []string{"HS256"}, HMACSecret: long}
	b64 := base64.RawURLEncoding.EncodeToString
	unsignedNone := b64([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + b64([]byte(`{"sub":"alice","exp":9999999999}`)) + "."
	noneSigned := sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, claims(nil), "")
	valid := sign(t, jwt.SigningMethodHS256, secret, claims(nil), "")

	cases := []struct {
		name string
		cfg  Config
		tok  string
		want string // the reason, so that no case passes for the wrong one
	}{
		{"no token", hs, "", "no token"},
		{"alg none", hs, unsignedNone, "signing method none is invalid"},
		{"alg none via the library", hs, noneSigned, "signing method none is invalid"},
		{"alg none with RS256 configured", rs, noneSigned, "signing method none is invalid"},
		{"HS512 not configured", hs512, sign(t, jwt.SigningMethodHS512, long, claims(nil), ""), "signing method HS512 is invalid"},
		{"RS512 not configured", rs, sign(t, jwt.SigningMethodRS512, k.rsa, claims(nil), ""), "signing method RS512 is invalid"},
		{"ES256 not configured", rs, sign(t, jwt.SigningMethodES256, k.ec, claims(nil), ""), "signing method ES256 is invalid"},
		{"HS256 with the RSA PEM as secret, RS256 configured", rs, sign(t, jwt.SigningMethodHS256, rsaPEM, claims(nil), ""), "signing method HS256 is invalid"},
		{"HS256 with the RSA PEM as secret, both configured", both, sign(t, jwt.SigningMethodHS256, rsaPEM, claims(nil), ""), "signature is invalid"},
		{"RS256 with another key", rs, sign(t, jwt.SigningMethodRS256, k.rsa2, claims(nil), ""), "verification error"},
		{"wrong secret", hs, sign(t, jwt.SigningMethodHS256, []byte("another-secret-another-secret-32"), claims(nil), ""), "signature is invalid"},
		{"expired", hs, sign(t, jwt.SigningMethodHS256, secret, claims(map[string]any{"exp": time.Now().Add(-time.Minute).Unix()}), ""), "expired"},
		{"expired beyond the leeway", Config{Algorithms: []string{"HS256"}, HMACSecret: secret, Leeway: 30 * time.Second},
			sign(t, jwt.SigningMethodHS256, secret, claims(map[string]any{"exp": time.Now().Add(-time.Minute).Unix()}), ""), "expired"},
		{"not yet valid", hs, sign(t, jwt.SigningMethodHS256, secret, claims(map[string]any{"nbf": time.Now().Add(time.Hour).Unix()}), ""), "not valid yet"},
		{"missing exp", hs, sign(t, jwt.SigningMethodHS256, secret, claims(map[string]any{"exp": nil}), ""), "exp claim is required"},
		{"exp as a string", hs, sign(t, jwt.SigningMethodHS256, secret, claims(map[string]any{"exp": "9999999999"}), ""), "exp is invalid"},
		{"missing subject", hs, sign(t, jwt.SigningMethodHS256, secret, claims(map[string]any{"sub": nil}), ""), "missing or not a string"},
		{"empty subject", hs, sign(t, jwt.SigningMethodHS256, secret, claims(map[string]any{"sub": ""}), ""), "is empty"},
		{"numeric subject", hs, sign(t, jwt.SigningMethodHS256, secret, claims(map[string]any{"sub": 42}), ""), "missing or not a string"},
		{"oversized subject", hs, sign(t, jwt.SigningMethodHS256, secret, claims(map[string]any{"sub": strings.Repeat("u", MaxUserLen+1)}), ""), "longer than 256"},
		{"issuer mismatch", Config{Algorithms: []string{"HS256"}, HMACSecret: secret, Issuer: "shop"},
			sign(t, jwt.SigningMethodHS256, secret, claims(map[string]any{"iss": "evil"}), ""), "invalid issuer"},
		{"issuer missing", Config{Algorithms: []string{"HS256"}, HMACSecret: secret, Issuer: "shop"}, valid, "iss claim is required"},
		{"audience mismatch", Config{Algorithms: []string{"HS256"}, HMACSecret: secret, Audience: "seckill"},
			sign(t, jwt.SigningMethodHS256, secret, claims(map[string]any{"aud": "other"}), ""), "invalid audience"},
		{"audience missing", Config{Algorithms: []string{"HS256"}, HMACSecret: secret, Audience: "seckill"}, valid, "aud claim is required"},
		{"a.b.c", hs, "a.b.c", "malformed"},
		{"two segments", hs, valid[:strings.LastIndexByte(valid, '.')], "invalid number of segments"},
		{"thousands of dots", hs, strings.Repeat(".", 5000), "invalid number of segments"},
		{"valid token with a dot appended", hs, valid + ".", "invalid number of segments"},
		{"oversized", hs, valid + strings.Repeat("A", MaxTokenLen), "longer than 8192"},
		{"signature stripped", hs, valid[:strings.LastIndexByte(valid, '.')+1], "signature is invalid"},
		{"garbage", hs, "not a token", "outside base64url"},
		{"line break in the signature", hs, valid[:len(valid)-4] + "\r\n" + valid[len(valid)-4:], "outside base64url"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := mustNew(t, c.cfg).Verify(context.Background(), c.tok)
			if !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want ErrUnauthorized because %q", err, c.want)
			}
			if c.tok != "" && len(c.tok) > 20 && strings.Contains(err.Error(), c.tok) {
				t.Errorf("the error shows the token")
			}
		})
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	k := keys()
	rsaPEM := pemOf(t, &k.rsa.PublicKey)
	ecPEM := pemOf(t, &k.ec.PublicKey)
	privDER := must(t, func() ([]byte, error) { return x509MarshalPKCS8(k.ec) })
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no algorithms", Config{HMACSecret: secret}, "algorithms is required"},
		{"none", Config{Algorithms: []string{"none"}}, `unknown algorithm "none"`},
		{"lowercase", Config{Algorithms: []string{"hs256"}, HMACSecret: secret}, `unknown algorithm "hs256"`},
		{"HS256 without secret", Config{Algorithms: []string{"HS256"}}, "HS256 verifies tokens with an HMAC secret, and hmac_secret is not set: set it to 32 random bytes or more"},
		{"HS256 short secret", Config{Algorithms: []string{"HS256"}, HMACSecret: []byte("short")}, "HS256 needs an hmac_secret of 32 bytes or more, and the one set has 5"},
		{"HS512 32-byte secret", Config{Algorithms: []string{"HS512"}, HMACSecret: secret}, "HS512 needs an hmac_secret of 64 bytes or more"},
		{"secret without HS", Config{Algorithms: []string{"RS256"}, HMACSecret: secret, PublicKeyPEM: [][]byte{rsaPEM}}, "no HS256"},
		{"RS256 without key", Config{Algorithms: []string{"RS256"}}, "RS256 needs a matching public key"},
		{"ES384 with a P-256 key", Config{Algorithms: []string{"ES256", "ES384"}, PublicKeyPEM: [][]byte{ecPEM}}, "ES384 needs"},
		{"key no algorithm uses", Config{Algorithms: []string{"RS256"}, PublicKeyPEM: [][]byte{rsaPEM, ecPEM}}, "public key 2 is ECDSA P-256"},
		{"not PEM", Config{Algorithms: []string{"RS256"}, PublicKeyPEM: [][]byte{[]byte("hello")}}, "no PEM block"},
		{"private key", Config{Algorithms: []string{"ES256"}, PublicKeyPEM: [][]byte{pemBlock("PRIVATE KEY", privDER)}}, "is a private key"},
		{"bad jwks url", Config{Algorithms: []string{"RS256"}, JWKSURL: "ftp://x"}, "not an http(s) URL"},
		{"unreachable jwks", Config{Algorithms: []string{"RS256"}, JWKSURL: "http://127.0.0.1:1/jwks"}, "jwks"},
		{"negative leeway", Config{Algorithms: []string{"HS256"}, HMACSecret: secret, Leeway: -time.Second}, "leeway"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := New(c.cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want one mentioning %q", err, c.want)
			}
		})
	}
}

func TestTokenFromRequest(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	if _, err := TokenFromRequest(r); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("no header: %v", err)
	}
	r.Header.Set("Authorization", "bearer  abc.def.ghi ")
	if tok, err := TokenFromRequest(r); err != nil || tok != "abc.def.ghi" {
		t.Errorf("bearer: %q, %v", tok, err)
	}
	for _, h := range []string{"Basic YWxpY2U6cHc=", "Bearer", "Bearer ", "Bearerabc", "Bearer " + strings.Repeat("a", MaxTokenLen+1)} {
		r.Header.Set("Authorization", h)
		if _, err := TokenFromRequest(r); !errors.Is(err, ErrUnauthorized) {
			t.Errorf("%.30q: %v, want ErrUnauthorized", h, err)
		}
	}
	r.Header.Set("Authorization", "Bearer a.b.c")
	r.Header.Add("Authorization", "Bearer d.e.f")
	if _, err := TokenFromRequest(r); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("two headers: %v", err)
	}
}

func TestMint(t *testing.T) {
	v := mustNew(t, Config{Algorithms: []string{"HS256"}, HMACSecret: secret, Issuer: "shop", Audience: "seckill"})
	tok, err := Mint(MintConfig{Secret: secret, Subject: "carol", Issuer: "shop", Audience: []string{"seckill"}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := v.Verify(context.Background(), tok)
	if err != nil || c.User != "carol" {
		t.Fatalf("minted token: %+v, %v", c, err)
	}
	if d := time.Until(c.ExpiresAt); d < 14*time.Minute || d > 15*time.Minute {
		t.Errorf("expires in %v, want 15m", d)
	}
	expired, err := Mint(MintConfig{Secret: secret, Subject: "carol", Issuer: "shop", Audience: []string{"seckill"}, TTL: -time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(context.Background(), expired); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("expired minted token: %v", err)
	}
	for _, mc := range []MintConfig{{Secret: secret}, {Subject: "x", Secret: []byte("short")}, {Subject: "x", Secret: secret, Algorithm: "RS256"}} {
		if _, err := Mint(mc); err == nil {
			t.Errorf("Mint(%+v) succeeded", mc)
		}
	}
}

// TestAlgorithmsRegistered pins what parse relies on to skip the library's registry for a
// configured algorithm: every supported one is a signing method golang-jwt registers, under the
// same name.
func TestAlgorithmsRegistered(t *testing.T) {
	for name := range algorithms {
		m := jwt.GetSigningMethod(name)
		if m == nil || m.Alg() != name {
			t.Errorf("algorithm %s: the library registers %v", name, m)
		}
	}
}
