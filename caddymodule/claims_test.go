package caddymodule_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// claimsEcho is a site that forwards winners to a respond echoing the claim placeholders, and
// restyles every refusal with handle_errors echoing them too.
const claimsEcho = `route /seckill/* {
	seckill {
		forward
	}
	header X-Groups {http.seckill.claims.groups}
	respond "role={http.seckill.claims.role} level={http.seckill.claims.level} score={http.seckill.claims.score} vip={http.seckill.claims.vip} iat={http.seckill.claims.iat} groups={http.seckill.claims.groups} mixed={http.seckill.claims.mixed} obj=[{http.seckill.claims.obj}] nested=[{http.seckill.claims.nested}] objs=[{http.seckill.claims.objs}] nul=[{http.seckill.claims.nul}] absent=[{http.seckill.claims.absent}] sub={http.seckill.claims.sub} all=[{http.seckill.claims}]" 200
}
handle_errors {
	respond "{http.seckill.code} role=[{http.seckill.claims.role}]" {http.error.status_code}
}
`

// TestClaimPlaceholders checks {http.seckill.claims.<name>} after a token verifies: strings as
// they are, numbers and booleans formatted, arrays of scalars joined by commas, and nothing for
// objects, nulls, arrays of anything else and absent claims; the token itself is never exposed.
func TestClaimPlaceholders(t *testing.T) {
	now := time.Now()
	base := startCaddy(t, jwtBlock+"captcha off\nforward_secret fwd-secret\n"+
		activityBlock("cp", 5, 1, now.Add(-time.Minute), now.Add(time.Hour), 0), claimsEcho)
	c := newClient(t, base)
	iat := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	tok := signToken(t, jwt.SigningMethodHS256, jwtSecret, jwt.MapClaims{
		"sub":    "alice",
		"exp":    now.Add(time.Hour).Unix(),
		"iat":    iat,
		"role":   "admin",
		"level":  3,
		"score":  2.5,
		"vip":    true,
		"groups": []string{"gold", "beta"},
		"mixed":  []any{1, "x", false},
		"obj":    map[string]any{"k": "v"},
		"nested": []any{[]any{1}},
		"objs":   []any{map[string]any{"a": 1}},
		"nul":    nil,
	})

	path := buyPath(t, c, "cp", tok)
	r := c.Post(path, tok, "")
	want := "role=admin level=3 score=2.5 vip=true iat=1767225600 groups=gold,beta mixed=1,x,false " +
		"obj=[] nested=[] objs=[] nul=[] absent=[] sub=alice all=[{http.seckill.claims}]"
	if r.Status != http.StatusOK || string(r.Raw) != want {
		t.Errorf("forwarded winner:\n got %d %q\nwant 200 %q", r.Status, r.Raw, want)
	}
	if got := r.Header.Get("X-Groups"); got != "gold,beta" {
		t.Errorf("X-Groups %q", got)
	}
	if strings.Contains(string(r.Raw), tok) || strings.Contains(string(r.Raw), strings.Split(tok, ".")[2]) {
		t.Error("the token leaked into the answer")
	}

	// A refusal after the token verified carries the claims into handle_errors; one before it
	// (no token) has none, and the placeholder is empty rather than left as text.
	r = c.Post(path, tok, "")
	if r.Status != http.StatusConflict || string(r.Raw) != "limit_reached role=[admin]" {
		t.Errorf("refusal after the token: %d %q", r.Status, r.Raw)
	}
	r = c.Post(path, "", "")
	if r.Status != http.StatusUnauthorized || string(r.Raw) != "unauthorized role=[]" {
		t.Errorf("refusal without a token: %d %q", r.Status, r.Raw)
	}
	// A token that does not verify exposes none of its claims.
	forged := signToken(t, jwt.SigningMethodHS256, []byte("another-secret-0123456789abcdefgh"), jwt.MapClaims{
		"sub": "mallory", "exp": now.Add(time.Hour).Unix(), "role": "admin",
	})
	r = c.Post("/seckill/cp/path", forged, "")
	if r.Status != http.StatusUnauthorized || string(r.Raw) != "unauthorized role=[]" {
		t.Errorf("refusal of a forged token: %d %q", r.Status, r.Raw)
	}
}

// TestRequestPlaceholders checks {http.seckill.code}, .activity, .user, .reservation and .message
// for a forwarded winner and for refusals before and after the token: each is known once the
// handler knows its value (and left as text by respond before), and a refusal's code and message
// reach handle_errors.
func TestRequestPlaceholders(t *testing.T) {
	now := time.Now()
	base := startCaddy(t, jwtBlock+"captcha off\nforward_secret fwd-secret\n"+
		activityBlock("pl", 5, 1, now.Add(-time.Minute), now.Add(time.Hour), 0), `route /seckill/* {
	seckill {
		forward
	}
	respond "code={http.seckill.code} act={http.seckill.activity} user={http.seckill.user} res={http.seckill.reservation} msg=[{http.seckill.message}]" 200
}
handle_errors {
	respond "code={http.seckill.code} act=[{http.seckill.activity}] user=[{http.seckill.user}] res=[{http.seckill.reservation}] msg={http.seckill.message}" {http.error.status_code}
}
`)
	c := newClient(t, base)
	alice := token(t, "alice")
	path := buyPath(t, c, "pl", alice)

	r := c.Post(path, alice, "")
	got := string(r.Raw)
	if r.Status != http.StatusOK || !strings.HasPrefix(got, "code=queued act=pl user=alice res=") ||
		!strings.HasSuffix(got, " msg=[{http.seckill.message}]") {
		t.Fatalf("forwarded winner: %d %q", r.Status, got)
	}
	reservation := strings.TrimSuffix(strings.TrimPrefix(got, "code=queued act=pl user=alice res="), " msg=[{http.seckill.message}]")
	if reservation == "" || strings.Contains(reservation, "{") {
		t.Errorf("reservation placeholder %q", reservation)
	}

	for _, tc := range []struct {
		what, path, tok string
		status          int
		want            string
	}{
		{"after the token", path, alice, http.StatusConflict,
			"code=limit_reached act=[pl] user=[alice] res=[{http.seckill.reservation}] msg=you already hold as many items as allowed"},
		{"before the token", path, "", http.StatusUnauthorized,
			"code=unauthorized act=[pl] user=[{http.seckill.user}] res=[{http.seckill.reservation}] msg=a bearer token is required"},
		{"before the activity", "/seckill/pl/buy/x/y", alice, http.StatusNotFound,
			"code=not_found act=[{http.seckill.activity}] user=[{http.seckill.user}] res=[{http.seckill.reservation}] msg=no such activity or call"},
	} {
		r := c.Post(tc.path, tc.tok, "")
		if r.Status != tc.status || string(r.Raw) != tc.want {
			t.Errorf("refusal %s:\n got %d %q\nwant %d %q", tc.what, r.Status, r.Raw, tc.status, tc.want)
		}
	}
}
