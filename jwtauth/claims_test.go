package jwtauth

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// signRaw signs an HS256 token whose payload is exactly payload, so that tests can send JSON no
// encoder would write (repeated members, escapes, odd spacing).
func signRaw(payload string) string {
	b64 := base64.RawURLEncoding.EncodeToString
	text := b64([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + b64([]byte(payload))
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(text))
	return text + "." + b64(m.Sum(nil))
}

// referenceVerify is Verify as it was written on jwt.Parser and jwt.MapClaims: the yardstick
// parse and tokenClaims must match, decision for decision. Public keys are v's.
func referenceVerify(cfg Config, token string) (string, error) {
	return referenceVerifyKeys(cfg, nil, token)
}

func referenceVerifyKeys(cfg Config, v *Verifier, token string) (string, error) {
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(cfg.Algorithms), jwt.WithExpirationRequired(), jwt.WithIssuedAt(), jwt.WithLeeway(cfg.Leeway),
		jwt.WithStrictDecoding(),
	}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	userClaim := cfg.UserClaim
	if userClaim == "" {
		userClaim = "sub"
	}
	mc := jwt.MapClaims{}
	keyFunc := func(t *jwt.Token) (any, error) {
		if algorithms[t.Method.Alg()].family == famHMAC {
			return cfg.HMACSecret, nil
		}
		kid, _ := t.Header["kid"].(string)
		keys, err := v.keys(context.Background(), t.Method.Alg(), kid)
		if err != nil {
			return nil, err
		}
		set := jwt.VerificationKeySet{}
		for _, k := range keys {
			set.Keys = append(set.Keys, k)
		}
		return set, nil
	}
	if _, err := jwt.NewParser(opts...).ParseWithClaims(token, mc, keyFunc); err != nil {
		return "", err
	}
	user, ok := mc[userClaim].(string)
	if !ok || user == "" || len(user) > MaxUserLen {
		return "", errors.New("no usable user")
	}
	return user, nil
}

// claimValues are JSON values of every type, including the ones MapClaims refuses or reads
// specially: 0 (an absent date), numbers beyond float64's range, escapes, non-ASCII, null.
func claimValues(now time.Time) []string {
	later := strconv.FormatInt(now.Add(time.Hour).Unix(), 10)
	earlier := strconv.FormatInt(now.Add(-time.Hour).Unix(), 10)
	return []string{
		later, earlier, later + ".75", "0", "-0", "0.0", later[:5] + "e5", "1e400", "-1e400", "1e-400",
		"1" + strings.Repeat("0", 308), "1" + strings.Repeat("0", 309), "12345678901234567890",
		`"alice"`, `""`, `"shop"`, `"seckill"`, `"al\u0069ce"`, `"\"q\""`, `"é"`, `"` + strings.Repeat("u", 300) + `"`,
		"null", "true", "false", "[]", `["seckill"]`, `["other","seckill"]`, `["seckill",1]`, `[null]`,
		`[1e400]`, `{}`, `{"exp":1e400}`, `{"a":[1,{"b":"c"}]}`, later + "e0",
	}
}

var claimKeys = []string{
	"exp", "nbf", "iat", "iss", "sub", "aud", "uid", "EXP", "Sub", `\u0065xp`, `s\u0075b`, "other", "",
}

// randomPayload builds a JSON object from claimKeys and claimValues, with repeats and spacing.
func randomPayload(rng *rand.Rand, values []string) string {
	space := func() string { return []string{"", " ", "\n\t ", "\r\n"}[rng.IntN(4)] }
	var b strings.Builder
	b.WriteString(space() + "{" + space())
	n := rng.IntN(8)
	if rng.IntN(2) == 0 {
		// Mostly valid tokens: a subject and an expiry first, which later members may override.
		fmt.Fprintf(&b, `"sub":"alice","exp":%d`, time.Now().Add(time.Hour).Unix())
		if n > 0 {
			b.WriteString(",")
		}
	}
	for i := range n {
		if i > 0 {
			b.WriteString(space() + "," + space())
		}
		fmt.Fprintf(&b, `"%s"%s:%s%s`, claimKeys[rng.IntN(len(claimKeys))], space(), space(), values[rng.IntN(len(values))])
	}
	b.WriteString(space() + "}" + space())
	return b.String()
}

// TestTokenClaimsMatchMapClaims checks Verify, which reads only the claims it needs, against the
// same verification on jwt.MapClaims, for hand-picked and generated payloads and four
// configurations: the same tokens are accepted, for the same user.
func TestTokenClaimsMatchMapClaims(t *testing.T) {
	now := time.Now()
	values := claimValues(now)
	later := now.Add(time.Hour).Unix()
	payloads := []string{
		`{}`, `null`, `[]`, `"x"`, `1`,
		fmt.Sprintf(`{"sub":"alice","exp":%d}`, later),
		fmt.Sprintf(`{"sub":"alice","exp":%d,"exp":0}`, later),
		fmt.Sprintf(`{"sub":"alice","exp":0,"exp":%d}`, later),
		fmt.Sprintf(`{"sub":"alice","EXP":%d}`, later),
		fmt.Sprintf(`{"sub":"alice","\u0065xp":%d}`, later),
		fmt.Sprintf(`{"sub":"alice","exp":%d,"x":1e400}`, later),
		fmt.Sprintf(`{"sub":"alice","exp":%d,"x":[{"y":-1E+400}]}`, later),
		fmt.Sprintf(`{"sub":"alice","exp":%d,"x":1e-400}`, later),
		fmt.Sprintf(`{"sub":"alice","exp":%d,"nbf":null}`, later),
		fmt.Sprintf(`{"sub":"alice","exp":%d,"nbf":"0"}`, later),
		fmt.Sprintf(`{"sub":"alice","exp":%d,"nbf":%d}`, later, later),
		fmt.Sprintf(`{"sub":"alice","exp":%d,"iat":"yesterday"}`, later),
		fmt.Sprintf(`{"sub":"alice","exp":%d.999}`, now.Unix()),
		fmt.Sprintf(`{"sub":"al\u0069ce","exp":%d}`, later),
		fmt.Sprintf(`{"sub":"alice","sub":"bob","exp":%d}`, later),
		fmt.Sprintf(`{"sub":"alice","sub":null,"exp":%d}`, later),
		fmt.Sprintf(`{"sub":"alice","uid":"bob","exp":%d,"iss":"shop","aud":["x","seckill"]}`, later),
		fmt.Sprintf(`{"sub":"alice","uid":"bob","exp":%d,"iss":"shop","aud":"seckill"}`, later),
		fmt.Sprintf(`{"sub":"alice","uid":"bob","exp":%d,"iss":"shop","aud":["seckill",2]}`, later),
		fmt.Sprintf(`{"sub":"alice","uid":"bob","exp":%d,"iss":"shop","aud":7}`, later),
		fmt.Sprintf(`{"sub":"alice","uid":"bob","exp":%d,"iss":7,"aud":"seckill"}`, later),
		fmt.Sprintf(`{"sub":"alice","uid":"bob","exp":%d,"iss":"sh\u006fp","aud":"seckill"}`, later),
		fmt.Sprintf("{\"sub\":\"\xff\",\"exp\":%d}", later),
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		payloads = append(payloads, randomPayload(rng, values))
	}
	configs := []Config{
		{Algorithms: []string{"HS256"}, HMACSecret: secret},
		{Algorithms: []string{"HS256"}, HMACSecret: secret, Leeway: time.Minute},
		{Algorithms: []string{"HS256"}, HMACSecret: secret, UserClaim: "uid", Issuer: "shop", Audience: "seckill"},
		{Algorithms: []string{"HS256"}, HMACSecret: secret, UserClaim: "exp"},
	}
	accepted := 0
	for _, cfg := range configs {
		v := mustNew(t, cfg)
		for _, p := range payloads {
			tok := signRaw(p)
			wantUser, wantErr := referenceVerify(cfg, tok)
			got, err := v.Verify(context.Background(), tok)
			if (err == nil) != (wantErr == nil) || got.User != wantUser {
				t.Errorf("user claim %q, payload %s:\n got %q, %v\nwant %q, %v", cfg.UserClaim, p, got.User, err, wantUser, wantErr)
				continue
			}
			if err != nil {
				continue
			}
			accepted++
			m, err := got.Map()
			want := jwt.MapClaims{}
			if _, _, perr := jwt.NewParser().ParseUnverified(tok, want); err != nil || perr != nil || !reflect.DeepEqual(m, map[string]any(want)) {
				t.Errorf("payload %s: Map() = %v, %v; want %v", p, m, err, want)
			}
		}
	}
	if accepted < len(payloads)/10 {
		t.Errorf("only %d of %d verifications accepted: the generated payloads test too little", accepted, len(payloads)*len(configs))
	}
}

// TestTokenClaimsGetters checks the jwt.Claims methods against MapClaims's for each claim and
// value, errors included.
func TestTokenClaimsGetters(t *testing.T) {
	for _, key := range claimKeys {
		for _, val := range claimValues(time.Now()) {
			payload := fmt.Sprintf(`{"%s":%s}`, key, val)
			mc := jwt.MapClaims{}
			mErr := jsonUnmarshal(payload, mc)
			tc := &tokenClaims{userClaim: "sub"}
			tErr := jsonUnmarshal(payload, tc)
			if (mErr == nil) != (tErr == nil) {
				t.Errorf("%s: decoding: MapClaims %v, tokenClaims %v", payload, mErr, tErr)
				continue
			}
			if mErr != nil {
				continue
			}
			for _, get := range []struct {
				name string
				m, c func() (any, error)
			}{
				{"exp", func() (any, error) { return mc.GetExpirationTime() }, func() (any, error) { return tc.GetExpirationTime() }},
				{"nbf", func() (any, error) { return mc.GetNotBefore() }, func() (any, error) { return tc.GetNotBefore() }},
				{"iat", func() (any, error) { return mc.GetIssuedAt() }, func() (any, error) { return tc.GetIssuedAt() }},
				{"iss", func() (any, error) { return mc.GetIssuer() }, func() (any, error) { return tc.GetIssuer() }},
				{"sub", func() (any, error) { return mc.GetSubject() }, func() (any, error) { return tc.GetSubject() }},
				{"aud", func() (any, error) { return mc.GetAudience() }, func() (any, error) { return tc.GetAudience() }},
			} {
				mv, me := get.m()
				cv, ce := get.c()
				if (me == nil) != (ce == nil) || !reflect.DeepEqual(mv, cv) {
					t.Errorf("%s: %s: MapClaims %v, %v; tokenClaims %v, %v", payload, get.name, mv, me, cv, ce)
				}
				if ce != nil && !errors.Is(ce, jwt.ErrInvalidType) {
					t.Errorf("%s: %s: error %v does not wrap jwt.ErrInvalidType", payload, get.name, ce)
				}
			}
			user, ok := mc["sub"].(string)
			if tc.hasUser != ok || tc.user != user {
				t.Errorf("%s: user %q, %v; want %q, %v", payload, tc.user, tc.hasUser, user, ok)
			}
		}
	}
}

// jsonUnmarshal decodes payload into claims the way the parser does.
func jsonUnmarshal(payload string, claims jwt.Claims) error {
	tok := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256"}`)) + "." +
		base64.RawURLEncoding.EncodeToString([]byte(payload)) + ".c2ln"
	_, _, err := jwt.NewParser().ParseUnverified(tok, claims)
	return err
}

// TestTokenClaimsDirectInput checks that UnmarshalJSON, called directly with input the parser
// would never pass it, fails without panicking.
func TestTokenClaimsDirectInput(t *testing.T) {
	for _, in := range []string{
		"", "{", "}", `{"a"`, `{"a":`, `{"a":1`, `{"a":1,}`, `{"a" 1}`, `{"a":tru}`, `{"a":"x}`, `{"a":[1,]}`,
		`{"a":{"b"}}`, `{"a":1}x`, `{a:1}`, `{"a":01}`, `{"a":-}`, strings.Repeat("[", 20000),
		`{"a":` + strings.Repeat("[", maxClaimsDepth+2) + strings.Repeat("]", maxClaimsDepth+2) + `}`,
	} {
		tc := &tokenClaims{userClaim: "sub"}
		err := tc.UnmarshalJSON([]byte(in))
		if err == nil && in != `{"a":01}` && in != `{"a":-}` {
			// Leading zeros and a bare minus are left to the parser's own validation, which runs
			// before UnmarshalJSON; everything structural is refused here too.
			t.Errorf("%q: no error", in)
		}
	}
}

// BenchmarkVerify measures a typical buyer's token (sub, iat, exp): Verify, and beside it the
// verification it replaced (jwt.Parser on jwt.MapClaims, referenceVerify).
func BenchmarkVerify(b *testing.B) {
	tok, err := Mint(MintConfig{Secret: secret, Subject: "u123456", TTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	cfg := Config{Algorithms: []string{"HS256"}, HMACSecret: secret}
	v, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("Verify", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := v.Verify(context.Background(), tok); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("library", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := referenceVerify(cfg, tok); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestParseMatchesLibrary checks Verify's own parsing against jwt.Parser's for headers,
// segmentations and signatures of every kind, with HMAC and public-key algorithms: the same
// tokens are accepted, for the same user.
func TestParseMatchesLibrary(t *testing.T) {
	k := keys()
	b64 := base64.RawURLEncoding.EncodeToString
	later := time.Now().Add(time.Hour).Unix()
	payloads := []string{
		fmt.Sprintf(`{"sub":"alice","exp":%d}`, later),
		fmt.Sprintf(`{"sub":"alice","exp":%d,"nbf":%d}`, later, later),
		fmt.Sprintf(`{"sub":"alice","exp":%d,"iat":%d}`, later, later),
		`null`, `{"sub":"alice"}`,
	}
	headers := []string{
		`{"alg":"HS256","typ":"JWT"}`, `{"alg":"HS256"}`, ` { "typ" : "JWT" , "alg" : "HS256" } `,
		`{"alg":"HS512"}`, `{"alg":"none"}`, `{"alg":"foo"}`, `{"alg":null}`, `{"alg":256}`, `{}`, `null`,
		`[]`, `"HS256"`, `{"alg":"HS256","alg":"none"}`, `{"alg":"none","alg":"HS256"}`,
		`{"alg":"H\u005356"}`, `{"alg":"HS256","x":1e400}`, `{"alg":"HS256","x":[1,{"y":null}]}`,
		`{"alg":"HS256","kid":5}`, `{"alg":"HS256","kid":"k1"}`, `{"alg":"HS256"`, `{"alg":"HS256"}x`,
		`{"alg":"RS256"}`, `{"alg":"RS256","kid":"nope"}`, `{"alg":"ES256"}`, `{"alg":"EdDSA"}`,
	}
	hmacSig := func(text string) []byte {
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(text))
		return m.Sum(nil)
	}
	flip := func(s string) string { // the last character with its spare bits changed
		const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
		i := strings.IndexByte(alphabet, s[len(s)-1])
		return s[:len(s)-1] + string(alphabet[i^1])
	}
	var tokens []string
	for _, h := range headers {
		for _, p := range payloads {
			text := b64([]byte(h)) + "." + b64([]byte(p))
			good := b64(hmacSig(text))
			tokens = append(tokens,
				text+"."+good, text+"."+good+"=", text+"."+flip(good), text+".", text+"."+good[:10],
				text+"."+b64(hmacSig(text+"x")), text, text+"."+good+".", "."+text+"."+good,
				text[:5]+"\n"+text[5:]+"."+good, text+"."+good[:7]+"\n"+good[7:], text+"."+good+"!",
			)
		}
	}
	// Tokens signed by the library, some with a kid, some by a key or an algorithm nobody configured.
	claims := jwt.MapClaims{"sub": "alice", "exp": later}
	for _, c := range []struct {
		m   jwt.SigningMethod
		key any
	}{
		{jwt.SigningMethodHS256, secret}, {jwt.SigningMethodHS384, secret}, {jwt.SigningMethodHS512, secret},
		{jwt.SigningMethodRS256, k.rsa}, {jwt.SigningMethodRS256, k.rsa2}, {jwt.SigningMethodPS256, k.rsa},
		{jwt.SigningMethodES256, k.ec}, {jwt.SigningMethodES384, k.ec384}, {jwt.SigningMethodEdDSA, k.ed},
	} {
		for _, kid := range []string{"", "k1"} {
			tok := sign(t, c.m, c.key, claims, kid)
			tokens = append(tokens, tok, tok[:len(tok)-2], tok+"A")
		}
	}
	configs := []Config{
		{Algorithms: []string{"HS256"}, HMACSecret: secret},
		{Algorithms: []string{"HS256", "RS256", "ES256"}, HMACSecret: secret,
			PublicKeyPEM: [][]byte{pemOf(t, &k.rsa.PublicKey), pemOf(t, &k.ec.PublicKey)}},
		{Algorithms: []string{"PS256", "EdDSA", "ES384"}, PublicKeyPEM: [][]byte{pemOf(t, &k.rsa.PublicKey), pemOf(t, k.ed.Public()), pemOf(t, &k.ec384.PublicKey)}},
	}
	accepted := 0
	for i, cfg := range configs {
		v := mustNew(t, cfg)
		for _, tok := range tokens {
			wantUser, wantErr := referenceVerifyKeys(cfg, v, tok)
			if !compactJWS(tok) {
				// Stricter than the library on purpose: its base64 decoder skips CR and LF.
				wantUser, wantErr = "", errors.New("not compact")
			}
			got, err := v.Verify(context.Background(), tok)
			if (err == nil) != (wantErr == nil) || got.User != wantUser {
				t.Errorf("config %d, token %q:\n got %q, %v\nwant %q, %v", i, tok, got.User, err, wantUser, wantErr)
			}
			if err == nil {
				accepted++
			}
		}
	}
	t.Logf("%d of %d accepted", accepted, len(tokens)*len(configs))
	if accepted < 10 {
		t.Errorf("only %d tokens accepted: the cases test too little", accepted)
	}
}
