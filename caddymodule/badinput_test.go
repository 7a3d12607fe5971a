package caddymodule_test

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestBadInput sends every kind of bad request the edge must refuse, checks each gets the right
// 4xx with a JSON body, and checks that none of them changed the stock.
func TestBadInput(t *testing.T) {
	now := time.Now()
	base := startCaddy(t, jwtBlock+"captcha off\n"+
		activityBlock("bad", 10, 2, now.Add(-time.Minute), now.Add(time.Hour), 0)+
		activityBlock("other", 10, 2, now.Add(-time.Minute), now.Add(time.Hour), 0)+
		activityBlock("later", 10, 1, now.Add(time.Hour), now.Add(2*time.Hour), 2*time.Second), route)
	c := newClient(t, base)
	alice, bob := token(t, "alice"), token(t, "bob")

	pathOf := func(activity, tok string) string {
		r := c.Post("/seckill/"+activity+"/path", tok, "")
		if r.Status != http.StatusOK {
			t.Fatalf("path %s: %s", activity, r)
		}
		return r.Str("path")
	}
	alicePath, bobPath, aliceOther := pathOf("bad", alice), pathOf("bad", bob), pathOf("other", alice)
	aliceHash := alicePath[strings.LastIndexByte(alicePath, '/')+1:]
	otherHash := aliceOther[strings.LastIndexByte(aliceOther, '/')+1:]

	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Hour).Unix()
	none, err := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"sub": "alice", "exp": exp}).
		SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("tokens", func(t *testing.T) {
		for _, tc := range []struct{ name, tok string }{
			{"no token", ""},
			{"alg none", none},
			{"HS512 is not configured", signToken(t, jwt.SigningMethodHS512, jwtSecret, jwt.MapClaims{"sub": "alice", "exp": exp})},
			{"RS256 is not configured", signToken(t, jwt.SigningMethodRS256, rsaKey, jwt.MapClaims{"sub": "alice", "exp": exp})},
			{"wrong secret", signToken(t, jwt.SigningMethodHS256, []byte("not-the-secret"), jwt.MapClaims{"sub": "alice", "exp": exp})},
			{"expired", signToken(t, jwt.SigningMethodHS256, jwtSecret, jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(-time.Hour).Unix()})},
			{"missing exp", signToken(t, jwt.SigningMethodHS256, jwtSecret, jwt.MapClaims{"sub": "alice"})},
			{"exp as string", signToken(t, jwt.SigningMethodHS256, jwtSecret, jwt.MapClaims{"sub": "alice", "exp": "9999999999"})},
			{"missing subject", signToken(t, jwt.SigningMethodHS256, jwtSecret, jwt.MapClaims{"exp": exp})},
			{"empty subject", signToken(t, jwt.SigningMethodHS256, jwtSecret, jwt.MapClaims{"sub": "", "exp": exp})},
			{"iat ten years ahead", signToken(t, jwt.SigningMethodHS256, jwtSecret, jwt.MapClaims{"sub": "alice", "exp": exp, "iat": time.Now().AddDate(10, 0, 0).Unix()})},
			{"a critical extension", critToken(t, `{"alg":"HS256","crit":["exp-v2"],"exp-v2":1}`, exp)},
			{"an unencoded payload", critToken(t, `{"alg":"HS256","b64":false,"crit":["b64"]}`, exp)},
			{"a.b.c", "a.b.c"},
			{"thousands of dots", strings.Repeat(".", 5000)},
			{"garbage", "not a token at all"},
		} {
			r := c.Post(alicePath, tc.tok, "")
			expect(t, tc.name, r, http.StatusUnauthorized, "unauthorized")
			if r.Header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s: no WWW-Authenticate header", tc.name)
			}
		}
		r := c.Do(http.MethodPost, alicePath, "", nil, "Authorization", "Basic YWxpY2U6cHc=")
		expect(t, "basic auth", r, http.StatusUnauthorized, "unauthorized")
	})

	t.Run("hashes", func(t *testing.T) {
		flipped := []byte(aliceHash)
		for i, ch := range flipped {
			if ch >= 'a' && ch <= 'z' {
				flipped[i] = ch - 'a' + 'A'
				break
			} else if ch >= 'A' && ch <= 'Z' {
				flipped[i] = ch - 'A' + 'a'
				break
			}
		}
		if string(flipped) == aliceHash {
			t.Fatalf("hash %q has no letter to flip", aliceHash)
		}
		random := make([]byte, 32)
		_, _ = rand.Read(random)
		for _, tc := range []struct{ name, path string }{
			{"another user's hash", bobPath},
			{"random hash", "/seckill/bad/buy/" + hex.EncodeToString(random)},
			{"case-flipped hash", "/seckill/bad/buy/" + string(flipped)},
			{"another activity's hash", "/seckill/bad/buy/" + otherHash},
			{"truncated hash", "/seckill/bad/buy/" + aliceHash[:len(aliceHash)-1]},
		} {
			expect(t, tc.name, c.Post(tc.path, alice, ""), http.StatusNotFound, "bad_path")
		}
		// The right hash under the wrong activity's path is not the buy path of that activity.
		expect(t, "hash of bad under other", c.Post("/seckill/other/buy/"+aliceHash, alice, ""), http.StatusNotFound, "bad_path")
	})

	t.Run("window", func(t *testing.T) {
		expect(t, "path before start - reveal", c.Post("/seckill/later/path", alice, ""), http.StatusForbidden, "not_started")
		expect(t, "buy before start", c.Post("/seckill/later/buy/"+aliceHash, alice, ""), http.StatusForbidden, "not_started")
		st := c.Get("/seckill/later", "")
		expect(t, "status of later", st, http.StatusOK, "ok")
		if st.Str("state") != "upcoming" {
			t.Errorf("state of later: %s", st)
		}
	})

	t.Run("unknown", func(t *testing.T) {
		expect(t, "unknown activity status", c.Get("/seckill/nope", ""), http.StatusNotFound, "not_found")
		expect(t, "unknown activity buy", c.Post("/seckill/nope/buy/"+aliceHash, alice, ""), http.StatusNotFound, "not_found")
		expect(t, "unknown activity path", c.Post("/seckill/nope/path", alice, ""), http.StatusNotFound, "not_found")
		expect(t, "bad activity id", c.Get("/seckill/a%20b", ""), http.StatusNotFound, "not_found")
		expect(t, "unknown call", c.Get("/seckill/bad/stock", ""), http.StatusNotFound, "not_found")
		expect(t, "trailing slash", c.Get("/seckill/bad/", ""), http.StatusNotFound, "not_found")
		expect(t, "bare prefix", c.Get("/seckill/", ""), http.StatusNotFound, "not_found")
		expect(t, "empty hash", c.Post("/seckill/bad/buy/", alice, ""), http.StatusNotFound, "not_found")
		expect(t, "long hash", c.Post("/seckill/bad/buy/"+strings.Repeat("a", 500), alice, ""), http.StatusNotFound, "not_found")
	})

	t.Run("bodies", func(t *testing.T) {
		big := strings.Repeat(" ", 4<<20)
		expect(t, "4 MiB body", c.Post(alicePath, alice, big), http.StatusRequestEntityTooLarge, "bad_request")
		for _, tc := range []struct{ name, body string }{
			{"malformed JSON", "{"},
			{"not an object", "[1]"},
			{"qty zero", `{"qty":0}`},
			{"qty negative", `{"qty":-1}`},
			{"qty above limit", `{"qty":3}`},
			{"qty as string", `{"qty":"1"}`},
			{"qty fraction", `{"qty":1.5}`},
			{"trailing data", `{"qty":1} {"qty":1}`},
		} {
			expect(t, tc.name, c.Post(alicePath, alice, tc.body), http.StatusBadRequest, "bad_request")
		}
		// The path call checks its body too, with the captcha off (it then needs none).
		expect(t, "4 MiB path body", c.Post("/seckill/bad/path", alice, big), http.StatusRequestEntityTooLarge, "bad_request")
		for _, body := range []string{"{", "[1]", `{"captcha_id":1}`, `{} {}`, "not json"} {
			expect(t, "path body "+body, c.Post("/seckill/bad/path", alice, body), http.StatusBadRequest, "bad_request")
		}
		// The message names the JSON field, in the contract's words, not Go's type.
		for call, tc := range map[string]struct{ body, want string }{
			alicePath:           {`{"qty":"1"}`, "qty must be a whole number, not a string"},
			"/seckill/bad/path": {`{"captcha_id":1}`, "captcha_id must be a string, not a number"},
		} {
			if r := c.Post(call, alice, tc.body); r.Str("message") != tc.want {
				t.Errorf("%s %s: message %q, want %q", call, tc.body, r.Str("message"), tc.want)
			}
		}
		for _, body := range []string{"", "{}", ` {"captcha_id":"x"} `} {
			expect(t, "path body "+body, c.Post("/seckill/bad/path", alice, body), http.StatusOK, "ok")
		}
		expect(t, "long idempotency key", c.Post(alicePath, alice, "", "Idempotency-Key", strings.Repeat("k", 129)),
			http.StatusBadRequest, "bad_request")
		expect(t, "two idempotency keys", c.Post(alicePath, alice, "", "Idempotency-Key", "a", "Idempotency-Key", "b"),
			http.StatusBadRequest, "bad_request")
	})

	t.Run("methods", func(t *testing.T) {
		for _, tc := range []struct{ method, path, allow string }{
			{http.MethodGet, alicePath, "POST"},
			{http.MethodPut, "/seckill/bad/path", "POST"},
			{http.MethodGet, "/seckill/bad/captcha", "POST"},
			{http.MethodDelete, "/seckill/bad", "GET, HEAD"},
			{http.MethodPost, "/seckill/bad", "GET, HEAD"},
			{http.MethodPost, "/seckill/bad/result", "GET, HEAD"},
		} {
			r := c.Do(tc.method, tc.path, alice, nil)
			expect(t, tc.method+" "+tc.path, r, http.StatusMethodNotAllowed, "method_not_allowed")
			if got := r.Header.Get("Allow"); got != tc.allow {
				t.Errorf("%s %s: Allow %q, want %q", tc.method, tc.path, got, tc.allow)
			}
		}
	})

	for _, id := range []string{"bad", "other", "later"} {
		if n := remaining(t, id); n != 10 {
			t.Errorf("%s: remaining %d after bad input, want 10", id, n)
		}
	}
	// The good request still works afterwards, and spends exactly what it asked for.
	r := c.Post(alicePath, alice, `{"qty":2}`)
	expect(t, "good buy", r, http.StatusAccepted, "queued")
	if n := remaining(t, "bad"); n != 8 {
		t.Errorf("remaining %d after a buy of 2, want 8", n)
	}
}

// critToken signs alice's claims under header, a JSON text, with the test secret (HS256): the
// token is valid but for what its header asks.
func critToken(t *testing.T, header string, exp int64) string {
	t.Helper()
	enc := base64.RawURLEncoding.EncodeToString
	text := enc([]byte(header)) + "." + enc([]byte(`{"sub":"alice","exp":`+strconv.FormatInt(exp, 10)+`}`))
	m := hmac.New(sha256.New, jwtSecret)
	m.Write([]byte(text))
	return text + "." + enc(m.Sum(nil))
}
