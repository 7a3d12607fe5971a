package caddymodule_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/hashedurl"
	"github.com/caddy-seckill/caddy-seckill/internal/testcaddy"
	"github.com/caddy-seckill/caddy-seckill/waitroom"
)

// The targets below drive request bodies through a Caddy running in this process, over loopback,
// against the memory store; Caddy starts once per target (for its seeds, or in each fuzzing
// worker), not per input. After each input they compare the store's record of the activity with
// the one before, so "a 4xx changes nothing" is checked on the real state.

// fuzzURLSecret signs the buy paths of the fuzzed sales, so that a target can check a path it is
// handed.
const fuzzURLSecret = "fuzz-url-secret-0123456789abcdef"

// documented are the (status, code) pairs of docs/api.md.
var documented = map[int][]string{
	http.StatusOK:                    {"ok", "none", "queued", "pending_payment", "paid", "cancelled", "failed"},
	http.StatusAccepted:              {"queued"},
	http.StatusBadRequest:            {"bad_request"},
	http.StatusUnauthorized:          {"unauthorized"},
	http.StatusForbidden:             {"not_started", "ended", "captcha_invalid", "not_admitted", "pow_required", "pow_invalid", "pow_expired"},
	http.StatusNotFound:              {"bad_path", "not_found", "not_in_line"},
	http.StatusMethodNotAllowed:      {"method_not_allowed"},
	http.StatusConflict:              {"limit_reached", "pow_spent"},
	http.StatusGone:                  {"sold_out"},
	http.StatusRequestEntityTooLarge: {"bad_request"},
	http.StatusTooManyRequests:       {"rate_limited"},
	http.StatusServiceUnavailable:    {"busy"},
}

// fuzzClient returns a client for one input that shares hc's connections with the others.
func fuzzClient(t *testing.T, base string, hc *http.Client) *client {
	return testcaddy.ClientOf(t, base, hc)
}

// snapshot reads an activity's definition and counters from the store; ok is false for an
// unknown activity.
func snapshot(t *testing.T, id string) (admission.Snapshot, bool) {
	t.Helper()
	s, err := app(t).Guard().Activity(context.Background(), id)
	if errors.Is(err, admission.ErrUnknownActivity) {
		return admission.Snapshot{}, false
	}
	if err != nil {
		t.Fatalf("activity %s: %v", id, err)
	}
	return s, true
}

// checkDocumented fails unless r is a JSON answer with a status and code of docs/api.md.
func checkDocumented(t *testing.T, what string, r response) {
	t.Helper()
	for _, c := range documented[r.Status] {
		if r.Code() == c {
			return
		}
	}
	t.Fatalf("%s: %s is not a documented answer", what, r)
}

// sendable reports whether Go's HTTP client can send v as a header value; the server trims
// spaces and tabs around what it gets.
func sendable(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// FuzzPathBody posts arbitrary bodies to POST /seckill/{a}/path with the captcha on. "$ID" and
// "$ANS" in a body stand for the live captcha's id and answer, so that the fuzzer can reach the
// well-formed bodies too; other says the call is made by another user than the captcha's owner.
// Every answer must be a documented word with its status, exactly the one the body calls for; a
// malformed body must leave the captcha usable; a well-formed one by its owner uses it up, right or
// wrong, and one by another user leaves it usable, as docs/api.md and captcha.Issuer.Verify say;
// and nothing changes the activity.
func FuzzPathBody(f *testing.F) {
	now := time.Now()
	base := startCaddy(f, jwtBlock+"url_secret "+fuzzURLSecret+"\ncaptcha on\n"+
		activityBlock("fzp", 10, 2, now.Add(-time.Minute), now.Add(24*time.Hour), 0), route)
	hc := newClient(f, base).HTTP
	for _, s := range []string{
		`{"captcha_id":"$ID","answer":"$ANS"}`,
		` {"answer":"$ANS","captcha_id":"$ID"} ` + "\n",
		`{"CAPTCHA_ID":"$ID","Answer":"$ANS"}`,
		`{"captcha_id":"$ID","answer":" $ANS\t"}`,
		`{"captcha_id":"$ID","answer":"$ANS","captcha_id":"$ID"}`,
		`{"captcha_id":"$ID","answer":"\u0030$ANS"}`,
		`{"captcha_id":"$ID","answer":"000000"}`,
		`{"captcha_id":"$ID","answer":"$ANS0"}`,
		`{"captcha_id":"$ID","answer":""}`,
		`{"captcha_id":"","answer":"$ANS"}`,
		`{"captcha_id":"nope","answer":"$ANS"}`,
		`{"captcha_id":"$ID","answer":1}`,
		`{"captcha_id":["$ID"],"answer":"$ANS"}`,
		`{"captcha_id":"$ID","answer":"$ANS"}{}`,
		`{"captcha_id":"$ID","answer":"$ANS"`,
		`{"captcha_id":"$ID$ID$ID$ID$ID","answer":"$ANS"}`,
		`{"captcha_id":"$ID","answer":"` + strings.Repeat("1", 129) + `"}`,
		"", " ", "{}", "null", "[]", `"$ID"`, "\xff", "{\"captcha_id\":\"\xff\",\"answer\":\"1\"}",
	} {
		f.Add(s, false)
	}
	f.Add(`{"captcha_id":"$ID","answer":"$ANS"}`, true)
	f.Add(`{"captcha_id":"$ID","answer":"1"}`, true)

	var users int // owners issued so far, so that each captcha has a new one
	var owner, id, answer string
	f.Fuzz(func(t *testing.T, raw string, other bool) {
		c := fuzzClient(t, base, hc)
		if id == "" {
			// The previous input used the captcha up: a new owner asks for one (a new user,
			// because captcha issuance is rate-limited per user).
			users++
			owner = fmt.Sprintf("p%d", users)
			r := c.Post("/seckill/fzp/captcha", token(t, owner), "")
			expect(t, "captcha", r, http.StatusOK, "ok")
			id = r.Str("captcha_id")
			var err error
			if answer, err = app(t).CaptchaAnswer(context.Background(), id); err != nil {
				t.Fatalf("captcha %s: %v", id, err)
			}
		}
		body := strings.NewReplacer("$ID", id, "$ANS", answer).Replace(raw)
		caller := owner
		if other {
			caller = "intruder"
		}
		before, _ := snapshot(t, "fzp")

		r := c.Post("/seckill/fzp/path", token(t, caller), body)
		checkDocumented(t, "path", r)

		// What docs/api.md and the captcha package say this body gets.
		var req struct {
			CaptchaID string `json:"captcha_id"`
			Answer    string `json:"answer"`
		}
		wellFormed := len(bytes.TrimSpace([]byte(body))) > 0 && json.Unmarshal([]byte(body), &req) == nil &&
			req.CaptchaID != "" && req.Answer != "" && len(req.CaptchaID) <= 128 && len(req.Answer) <= 128
		typed := strings.NewReplacer(" ", "", "\t", "").Replace(req.Answer) // spaces are ignored
		solved := wellFormed && req.CaptchaID == id && typed == answer && caller == owner
		_, err := app(t).CaptchaAnswer(context.Background(), id)
		live := err == nil
		switch {
		case !wellFormed:
			expect(t, fmt.Sprintf("malformed body %q", body), r, http.StatusBadRequest, "bad_request")
			if !live {
				t.Fatalf("malformed body %q used up the captcha", body)
			}
		case solved:
			expect(t, fmt.Sprintf("solving body %q", body), r, http.StatusOK, "ok")
			hash, ok := strings.CutPrefix(r.Str("path"), "/seckill/fzp/buy/")
			if !ok || !hashedurl.Verify([]byte(fuzzURLSecret), "fzp", owner, before.Salt, hash) {
				t.Fatalf("body %q: path %q is not %s's buy path", body, r.Str("path"), owner)
			}
		default:
			expect(t, fmt.Sprintf("wrong body %q by %s", body, caller), r, http.StatusForbidden, "captcha_invalid")
		}
		if wellFormed && req.CaptchaID == id && caller == owner && live {
			t.Fatalf("body %q answered %d but left the captcha usable", body, r.Status)
		}
		if caller != owner && !live {
			t.Fatalf("body %q by another user answered %d and used up the captcha", body, r.Status)
		}
		if wellFormed && req.CaptchaID != id && !live {
			t.Fatalf("body %q naming another captcha used up %s", body, id)
		}
		if after, _ := snapshot(t, "fzp"); !reflect.DeepEqual(after, before) {
			t.Fatalf("body %q changed the activity: %+v, was %+v", body, after, before)
		}
		if !live {
			id = ""
		}
	})
}

// FuzzBuyBody posts arbitrary bodies and Idempotency-Key headers to a user's own buy path. The
// answer must be 202 queued exactly when the key (if any) and the body are valid (docs/api.md:
// an optional {qty} from 1 to the limit, default 1), 400 bad_request otherwise; a 202 takes
// exactly qty items and queues one win, a 400 changes nothing. Each input is a new user, and a
// win is released afterwards, so that every input starts from the same stock.
func FuzzBuyBody(f *testing.F) {
	const limit = 3
	now := time.Now()
	base := startCaddy(f, jwtBlock+"url_secret "+fuzzURLSecret+"\ncaptcha off\n"+
		activityBlock("fzb", 1000, limit, now.Add(-time.Minute), now.Add(24*time.Hour), 0), route)
	hc := newClient(f, base).HTTP
	for _, s := range []string{"", " ", "\n\t", "{}", "null", `{"qty":1}`, `{"qty":3}`, `{"qty":4}`, `{"qty":0}`,
		`{"qty":-1}`, `{"qty":1.0}`, `{"qty":1e0}`, `{"qty":"2"}`, `{"qty":null}`, `{"QTY":2}`, `{"qty":2,"qty":1}`,
		`{"qty":1,"other":[1,2,{}]}`, `{"qty":1}{}`, `{"qty":1} `, `{"qty":1}x`, `[1]`, `1`, `"qty"`, "{",
		`{"qty":9223372036854775807}`, `{"qty":9223372036854775808}`, "\xef\xbb\xbf{}", "\u00a0"} {
		f.Add([]byte(s), "", false)
	}
	for _, k := range []string{"k1", "", " ", " k2 ", strings.Repeat("k", 128), strings.Repeat("k", 129),
		"a b", "\tk3", "ключ", "k\x80"} {
		f.Add([]byte(`{"qty":2}`), k, true)
	}
	// A good key with a bad body: the refusal must keep nothing under the key.
	f.Add([]byte(`{"qty":0}`), "k4", true)
	f.Add([]byte("{"), "k5", true)

	var users int // so that each input has a user who holds nothing yet
	f.Fuzz(func(t *testing.T, body []byte, key string, keyed bool) {
		if keyed && !sendable(key) {
			t.Skip("Go's HTTP client cannot send this header value")
		}
		c := fuzzClient(t, base, hc)
		users++
		user := fmt.Sprintf("b%d", users)
		tok := token(t, user)
		before, _ := snapshot(t, "fzb")
		// The path the path call would hand out (TestBadInput and the flow tests ask for it):
		// signing it here halves the cost of an input.
		path := signedBuyPath(t, fuzzURLSecret, "fzb", user)

		var hdr []string
		if keyed {
			hdr = []string{"Idempotency-Key", key}
		}
		r := c.Do(http.MethodPost, path, tok, bytes.NewReader(body), hdr...)
		checkDocumented(t, "buy", r)

		// What docs/api.md says this request gets.
		k := strings.Trim(key, " \t")
		keyOK := !keyed || k != "" && len(k) <= admission.MaxRequestIDLen && strings.IndexFunc(k, func(c rune) bool {
			return c < 0x21 || c > 0x7e
		}) < 0
		qty, bodyOK := int64(1), true
		// Like the handler, take a body of Unicode spaces (U+00A0 too) for no body, although
		// docs/api.md would call a lone U+00A0 malformed JSON: harmless, it buys the default 1.
		if len(bytes.TrimSpace(body)) > 0 {
			var req struct {
				Qty *int64 `json:"qty"`
			}
			switch err := json.Unmarshal(body, &req); {
			case err != nil:
				bodyOK = false
			case req.Qty != nil:
				qty = *req.Qty
				bodyOK = qty >= 1 && qty <= limit
			}
		}
		what := fmt.Sprintf("body %q, key %q (sent: %v)", body, key, keyed)
		after, _ := snapshot(t, "fzb")
		if !keyOK || !bodyOK {
			expect(t, what, r, http.StatusBadRequest, "bad_request")
			if !reflect.DeepEqual(after, before) {
				t.Fatalf("%s changed the activity: %+v, was %+v", what, after, before)
			}
			// Nothing of the user's either: no result record, and nothing kept under the key,
			// so the same key with a good body is a first buy, not the replay of a refusal.
			if _, err := app(t).Guard().GetResult(context.Background(), "fzb", user); !errors.Is(err, admission.ErrNotFound) {
				t.Fatalf("%s left a result record for %s (err %v)", what, user, err)
			}
			if keyed && keyOK {
				r2 := c.Do(http.MethodPost, path, tok, strings.NewReader("{}"), "Idempotency-Key", key)
				expect(t, what+", then {} with the same key", r2, http.StatusAccepted, "queued")
				if released, err := app(t).Guard().Release(context.Background(), "fzb", r2.Str("reservation_id")); err != nil || !released {
					t.Fatalf("release %s: %v, %v", r2.Str("reservation_id"), released, err)
				}
			}
			return
		}
		expect(t, what, r, http.StatusAccepted, "queued")
		if after.Remaining != before.Remaining-qty || after.Buyers != before.Buyers+1 || after.Queued != before.Queued+1 ||
			r.Num("remaining") != after.Remaining || r.Str("reservation_id") == "" {
			t.Fatalf("%s: answer %s took the activity from %+v to %+v; want %d items and one win", what, r, before, after, qty)
		}
		released, err := app(t).Guard().Release(context.Background(), "fzb", r.Str("reservation_id"))
		if err != nil || !released {
			t.Fatalf("release %s: %v, %v", r.Str("reservation_id"), released, err)
		}
		if n := remaining(t, "fzb"); n != before.Remaining {
			t.Fatalf("remaining %d after the release, want %d", n, before.Remaining)
		}
	})
}

// adminDefinition is the body of the admin API's PUT /seckill/activities/{id}, as the admin API's
// doc comment describes it.
type adminDefinition struct {
	Stock     int64          `json:"stock"`
	Limit     int64          `json:"limit"`
	Start     time.Time      `json:"start"`
	End       time.Time      `json:"end"`
	PayWithin caddy.Duration `json:"pay_within"`
	Buckets   int            `json:"buckets"`
}

// FuzzAdminActivityBody sends arbitrary bodies to the admin API's activity calls: PUT of a
// definition for a running activity or a new one (with or without force), POST to an activity
// (not a call) and POST of a release. A refusal must be a 4xx that leaves the store's record of the
// activity exactly as it was; an accepted definition must be stored as sent, with its end after
// its start, and is undone afterwards.
func FuzzAdminActivityBody(f *testing.F) {
	now := time.Now()
	_, adminAddr := startCaddyAdmin(f, jwtBlock+"captcha off\n"+
		activityBlock("fza", 10, 2, now.Add(-time.Minute), now.Add(24*time.Hour), 0), route)
	admin := "http://" + adminAddr
	hc := newClient(f, admin).HTTP

	for _, s := range []string{
		`{"stock":5,"limit":1,"start":"2026-01-01T00:00:00Z","end":"2099-01-01T00:00:00Z","pay_within":"10m"}`,
		`{"stock":10,"limit":2,"start":"2026-01-01T00:00:00Z","end":"2099-01-01T00:00:00Z"}`,
		`{"stock":0,"start":"2026-01-01T00:00:00+08:00","end":"2026-01-01T00:00:00.001+08:00","pay_within":1000000}`,
		`{"stock":1,"start":"2026-01-01T00:00:00.0001Z","end":"2026-01-01T00:00:00.0009Z"}`,
		`{"stock":1,"start":"2026-01-02T00:00:00Z","end":"2026-01-01T00:00:00Z"}`,
		`{"stock":1,"start":"2026-01-01T00:00:00Z","end":"2026-01-01T00:00:00Z"}`,
		`{"stock":-1,"start":"2026-01-01T00:00:00Z","end":"2099-01-01T00:00:00Z"}`,
		`{"stock":1,"limit":-1,"start":"2026-01-01T00:00:00Z","end":"2099-01-01T00:00:00Z"}`,
		`{"stock":1,"start":"2026-01-01T00:00:00Z","end":"2099-01-01T00:00:00Z","pay_within":"-1s"}`,
		`{"stock":1,"start":"2026-01-01T00:00:00Z","end":"2099-01-01T00:00:00Z","pay_within":"1y"}`,
		`{"stock":9223372036854775807,"limit":9223372036854775807,"start":"0001-01-01T00:00:00.001Z","end":"9999-12-31T23:59:59.999Z","pay_within":"106751d"}`,
		`{"stock":1,"start":"2026-01-01","end":"2099-01-01"}`,
		`{"stock":1,"end":"2099-01-01T00:00:00Z"}`,
		`{"stock":"1","start":"2026-01-01T00:00:00Z","end":"2099-01-01T00:00:00Z"}`,
		`{"stock":1.5,"start":"2026-01-01T00:00:00Z","end":"2099-01-01T00:00:00Z"}`,
		`{"stock":1,"start":"2026-01-01T00:00:00Z","end":"2099-01-01T00:00:00Z","salt":"x"}`,
		`{"stock":1,"limt":3,"start":"2026-01-01T00:00:00Z","end":"2099-01-01T00:00:00Z"}`,
		`{"stock":4,"buckets":2,"start":"2026-01-01T00:00:00Z","end":"2099-01-01T00:00:00Z"}`,
		`{"stock":1,"start":"2026-01-01T00:00:00Z","end":"2099-01-01T00:00:00Z"}{}`,
		`{"reservation_id":"nope"}`, `{"reservation_id":""}`,
		"", "{}", "null", "[]", "{", "\xff",
	} {
		f.Add([]byte(s), uint8(0), true)
	}
	f.Add([]byte(`{"stock":5,"start":"2026-01-01T00:00:00Z","end":"2099-01-01T00:00:00Z"}`), uint8(0), false)
	f.Add([]byte(`{"stock":5,"start":"2026-01-01T00:00:00Z","end":"2099-01-01T00:00:00Z"}`), uint8(1), false)
	f.Add([]byte(`{"stock":5,"start":"2026-01-01T00:00:00Z","end":"2099-01-01T00:00:00Z"}`), uint8(2), true)
	f.Add([]byte(`{"reservation_id":"nope"}`), uint8(3), false)

	f.Fuzz(func(t *testing.T, body []byte, call uint8, force bool) {
		id, method, path := "fza", http.MethodPut, "/seckill/activities/fza"
		switch call % 4 {
		case 1:
			id, path = "fzn", "/seckill/activities/fzn"
		case 2:
			method = http.MethodPost
		case 3:
			method, path = http.MethodPost, "/seckill/activities/fza/release"
		}
		if force {
			path += "?force=1"
		}
		before, existed := snapshot(t, id)
		r := fuzzClient(t, admin, hc).Do(method, path, "", bytes.NewReader(body), "Content-Type", "application/json")
		after, exists := snapshot(t, id)
		if r.Status == http.StatusOK && method == http.MethodPut {
			// Undo it whatever the checks below find, so that every input starts from the same
			// store.
			defer func() {
				g := app(t).Guard()
				var err error
				if existed {
					_, err = g.Define(context.Background(), before.Activity, true)
				} else {
					err = g.Delete(context.Background(), id, true)
				}
				if s, _ := snapshot(t, id); err != nil || existed && !reflect.DeepEqual(s, before) {
					t.Fatalf("undo %s %s %q: %v: %+v, want %+v", method, path, body, err, s, before)
				}
			}()
		}
		what := fmt.Sprintf("%s %s %q", method, path, body)

		if r.Status >= 400 {
			if r.Status >= 500 {
				t.Fatalf("%s: %s", what, r)
			}
			if exists != existed || !reflect.DeepEqual(after, before) {
				t.Fatalf("%s answered %s but changed the activity: %+v (exists %v), was %+v (existed %v)",
					what, r, after, exists, before, existed)
			}
		}
		if method == http.MethodPost && call%4 == 2 && r.Status != http.StatusMethodNotAllowed {
			t.Fatalf("%s: %s; want 405", what, r)
		}
		if method == http.MethodPost {
			// A release of a reservation nobody holds is 404, of a malformed body 400; nothing
			// here ever won, so nothing can be released.
			if r.Status < 400 {
				t.Fatalf("%s: %s", what, r)
			}
			return
		}

		// The definition docs say the admin API takes: a JSON object, stock and limit not
		// negative, start and end required (in the milliseconds the store keeps) with the end
		// after the start, pay_within not negative, no member but these. 0 means the default
		// limit and pay window; buckets need store redis, so none is valid here.
		var d adminDefinition
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		err := dec.Decode(&d)
		if _, end := dec.Token(); err == nil && end != io.EOF {
			err = errors.New("data after the object")
		}
		valid := err == nil && d.Stock >= 0 && d.Limit >= 0 && !d.Start.IsZero() && !d.End.IsZero() &&
			d.End.UnixMilli() > d.Start.UnixMilli() && d.PayWithin >= 0 && d.Buckets == 0
		switch {
		case r.Status == http.StatusBadRequest:
			if valid {
				t.Fatalf("%s: %s, for a valid definition", what, r)
			}
			return
		case r.Status == http.StatusConflict:
			// A running sale is redefined only with force.
			if !valid || !existed || force {
				t.Fatalf("%s: %s", what, r)
			}
			return
		case r.Status != http.StatusOK:
			t.Fatalf("%s: %s", what, r)
		}
		if !valid {
			t.Fatalf("%s: %s, for a definition docs/api.md refuses (%v)", what, r, err)
		}
		if !exists || after.Stock != d.Stock || after.Start.UnixMilli() != d.Start.UnixMilli() ||
			after.End.UnixMilli() != d.End.UnixMilli() || !after.End.After(after.Start) ||
			(d.Limit != 0 && after.Limit != d.Limit) || (d.PayWithin != 0 && after.PayWithin != time.Duration(d.PayWithin).Truncate(time.Millisecond)) ||
			(existed && after.Salt != before.Salt) || after.Sold != 0 {
			t.Fatalf("%s: %s stored %+v (was %+v)", what, r, after, before)
		}
	})
}

// joinBits is the proof of work FuzzJoinBody's room asks: low, so that an input costs a few
// dozen hashes to solve.
const joinBits = 4

// FuzzJoinBody posts arbitrary bodies, with arbitrary Content-Types, to POST /seckill/{a}/queue of
// two rooms: one with proof_of_work, whose body is {challenge, answer}, and one without, which
// reads no body. In a body "$CH" and "$ANS" stand for a live challenge issued to the caller and its
// answer, "$OLD" and "$OLDANS" for a genuine challenge of the caller past its expiry, "$WEAK" and
// "$WEAKANS" for one asking fewer bits than the room and "$OTHER" for another user's, so that
// the fuzzer reaches every answer docs/api.md gives. The caller is a new user, or (holder) one
// who already holds a place. Every answer must be the documented one the body calls for: a
// refusal changes neither the line nor the activity nor the spent set (the live challenge then
// still joins), a join takes exactly the next place (a holder keeps its own) and spends its
// answer.
func FuzzJoinBody(f *testing.F) {
	now := time.Now()
	base := startCaddy(f, jwtBlock+"captcha off\n"+
		roomBlock("fzq", 10, now.Add(-time.Minute), now.Add(24*time.Hour), fmt.Sprintf("admit 1/h\nproof_of_work %d", joinBits))+
		roomBlock("fzo", 10, now.Add(-time.Minute), now.Add(24*time.Hour), "admit 1/h"), route)
	hc := newClient(f, base).HTTP
	for _, s := range []string{
		`{"challenge":"$CH","answer":"$ANS"}`,
		` {"answer":"$ANS","challenge":"$CH"} ` + "\n",
		`{"CHALLENGE":"$CH","Answer":"$ANS"}`,
		`{"challenge":"$CH","answer":"$ANS","challenge":"$CH"}`,
		`{"challenge":"$CH","answer":"$ANS","extra":[1,{}]}`,
		`{"challenge":"$CH","answer":"0$ANS"}`,
		`{"challenge":"$CH","answer":"$ANS0"}`,
		`{"challenge":"$CH","answer":" $ANS"}`,
		`{"challenge":"$CH","answer":"-1"}`,
		`{"challenge":"$CH","answer":"99999999999999999999"}`,
		`{"challenge":"$CH","answer":"999999999999999999999"}`,
		`{"challenge":"$CH","answer":""}`,
		`{"challenge":"$CH"}`,
		`{"answer":"$ANS"}`,
		`{"challenge":"","answer":""}`,
		`{"challenge":"$CH","answer":$ANS}`,
		`{"challenge":["$CH"],"answer":"$ANS"}`,
		`{"challenge":"$CH","answer":"$ANS"}{}`,
		`{"challenge":"$CH","answer":"$ANS"`,
		`{"challenge":"$CH.","answer":"$ANS"}`,
		`{"challenge":"x$CH","answer":"$ANS"}`,
		`{"challenge":"$OLD","answer":"$OLDANS"}`,
		`{"challenge":"$OLD","answer":"x"}`,
		`{"challenge":"$WEAK","answer":"$WEAKANS"}`,
		`{"challenge":"$OTHER","answer":"$ANS"}`,
		`{"challenge":"1.4.AAAA.BBBB","answer":"1"}`,
		`{"challenge":"...","answer":"1"}`,
		"", " ", "\n", "{}", "null", "[]", "0", `"$CH"`, "{", "\xff", "\xef\xbb\xbf{}",
		"challenge=$CH&answer=$ANS",
		"{\"challenge\":\"\xff\",\"answer\":\"1\"}",
	} {
		f.Add([]byte(s), "application/json", true, false)
	}
	for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
		"application/json; charset=utf-16", "application/xml", "*/*", "\u00e9"} {
		f.Add([]byte(`{"challenge":"$CH","answer":"$ANS"}`), ct, true, false)
		f.Add([]byte(`{"challenge":"$CH","answer":"$ANS"}`), ct, false, false)
	}
	f.Add([]byte(`{"challenge":"$CH","answer":"$ANS"}`), "application/json", true, true)
	f.Add([]byte(`{"challenge":"$CH","answer":"1"}`), "application/json", true, true)
	f.Add([]byte(""), "", true, true)
	for _, s := range []string{"", "{", "null", "\xff", `{"challenge":"$CH","answer":"$ANS"}`} {
		f.Add([]byte(s), "application/json", false, false)
		f.Add([]byte(s), "application/json", false, true)
	}

	var users int                 // so that each input has a user who holds no place yet
	holders := map[string]int64{} // room -> its holder's position, once the holder joined
	f.Fuzz(func(t *testing.T, raw []byte, contentType string, pow, holder bool) {
		if !sendable(contentType) {
			t.Skip("Go's HTTP client cannot send this header value")
		}
		c := fuzzClient(t, base, hc)
		act := "fzo"
		if pow {
			act = "fzq"
		}
		users++
		user := fmt.Sprintf("q%d", users)
		if holder {
			user = "holder"
		}
		tok := token(t, user)
		key := func() []byte {
			s, ok := snapshot(t, act)
			if !ok {
				t.Fatalf("activity %s is gone", act)
			}
			return waitroom.ProofKey(s.Salt)
		}()
		if holder && holders[act] == 0 {
			body := ""
			if pow {
				body = proofBody(solveChallenge(t, c, act, tok))
			}
			r := c.Post("/seckill/"+act+"/queue", tok, body)
			expect(t, "the holder joins", r, http.StatusOK, "ok")
			holders[act] = r.Num("position")
		}

		var live, liveAns, old string
		body := raw
		if pow {
			live, liveAns = solveChallenge(t, c, act, tok)
			var oldAns string
			old, oldAns = issueSolved(t, key, act, user, joinBits, time.Now().Add(-waitroom.ProofTTL-time.Second))
			weak, weakAns := issueSolved(t, key, act, user, joinBits-1, time.Now())
			other, _ := issueSolved(t, key, act, "someone-else", joinBits, time.Now())
			body = []byte(strings.NewReplacer("$CH", live, "$ANS", liveAns, "$OLDANS", oldAns, "$OLD", old,
				"$WEAKANS", weakAns, "$WEAK", weak, "$OTHER", other).Replace(string(raw)))
		}
		line := tallies(t, []string{act})[act]
		before, _ := snapshot(t, act)

		var hdr []string
		if contentType != "" {
			hdr = []string{"Content-Type", contentType}
		}
		r := c.Do(http.MethodPost, "/seckill/"+act+"/queue", tok, bytes.NewReader(body), hdr...)
		checkDocumented(t, "join", r)
		what := fmt.Sprintf("%s joins %s with body %q (Content-Type %q)", user, act, body, contentType)

		// What docs/api.md says this join gets: a room without proof_of_work reads no body; one
		// with it wants {challenge, answer}, the challenge issued to the caller, still valid, asking
		// the room's bits, and an answer of 1 to 20 digits that solves it.
		var req struct {
			Challenge string `json:"challenge"`
			Answer    string `json:"answer"`
		}
		code, status := "ok", http.StatusOK
		if pow {
			switch {
			case len(body) == 0:
				code, status = "pow_required", http.StatusForbidden
			case json.Unmarshal(body, &req) != nil:
				code, status = "bad_request", http.StatusBadRequest
			case req.Challenge == "" && req.Answer == "":
				code, status = "pow_required", http.StatusForbidden
			case req.Challenge == old:
				// The one well-signed challenge refused for its age, whatever the answer.
				code, status = "pow_expired", http.StatusForbidden
			case req.Challenge == live && digits(req.Answer) && waitroom.ProofBits(live, req.Answer) >= joinBits:
			default:
				code, status = "pow_invalid", http.StatusForbidden
			}
		}
		expect(t, what, r, status, code)

		afterLine := tallies(t, []string{act})[act]
		if after, _ := snapshot(t, act); !reflect.DeepEqual(after, before) {
			t.Fatalf("%s changed the activity: %+v, was %+v", what, after, before)
		}
		if code != "ok" {
			if afterLine != line {
				t.Fatalf("%s answered %s but changed the line: %v, was %v", what, r, afterLine, line)
			}
			if !holder {
				expect(t, what+": the caller's place", c.Get("/seckill/"+act+"/queue", tok), http.StatusNotFound, "not_in_line")
			}
			if pow && req.Challenge == live {
				// The refusal did not spend the live challenge: it still joins.
				r2 := c.Post("/seckill/"+act+"/queue", tok, proofBody(live, liveAns))
				expect(t, what+", then the live challenge solved", r2, http.StatusOK, "ok")
			}
			return
		}
		switch {
		case holder:
			if r.Num("position") != holders[act] || afterLine != line {
				t.Fatalf("%s: %s; the holder's place is %d and the line must stay %v, is %v", what, r, holders[act], line, afterLine)
			}
		case r.Num("position") != line[0]+1 || afterLine[0] != line[0]+1:
			t.Fatalf("%s: %s took the line from %v to %v; want the next place, %d", what, r, line, afterLine, line[0]+1)
		}
		if pow {
			expect(t, what+", again", c.Post("/seckill/"+act+"/queue", tok, proofBody(live, req.Answer)), http.StatusConflict, "pow_spent")
		}
	})
}

// digits reports whether s is an answer of the proof of work's form: 1 to 20 decimal digits.
func digits(s string) bool {
	if s == "" || len(s) > 20 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
