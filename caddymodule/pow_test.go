package caddymodule_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
	"github.com/caddy-seckill/caddy-seckill/waitroom"
)

// solveChallenge asks c for a challenge for tok's user in activity and solves it.
func solveChallenge(t *testing.T, c *client, activity, tok string) (challenge, answer string) {
	t.Helper()
	r := c.Get("/seckill/"+activity+"/queue/challenge", tok)
	if r.Status != http.StatusOK || r.Code() != "ok" || r.Str("challenge") == "" || r.Num("bits") < 1 {
		t.Fatalf("challenge of %s: %s", activity, r)
	}
	return r.Str("challenge"), waitroom.Solve(r.Str("challenge"), int(r.Num("bits")))
}

// issueSolved signs a challenge of bits for user in activity with key as if issued at at, and
// solves it: the handler would not issue an old or a weaker one.
func issueSolved(t *testing.T, key []byte, activity, user string, bits int, at time.Time) (challenge, answer string) {
	t.Helper()
	ch, err := waitroom.NewChallenge(key, activity, user, bits, at)
	if err != nil {
		t.Fatal(err)
	}
	return ch.Token, waitroom.Solve(ch.Token, bits)
}

func proofBody(challenge, answer string) string {
	b, _ := json.Marshal(map[string]string{"challenge": challenge, "answer": answer})
	return string(b)
}

// TestWaitingRoomProofOfWork walks proof_of_work on one gateway (store memory): a join without a
// proof, with a wrong answer, with another user's challenge, a good one, the same answer again;
// every refusal leaves the line as it was.
func TestWaitingRoomProofOfWork(t *testing.T) {
	now := time.Now()
	base := startCaddy(t, jwtBlock+"captcha off\n"+
		roomBlock("pow", 5, now.Add(-time.Minute), now.Add(time.Hour), "admit 1/h\nproof_of_work 8")+
		roomBlock("free", 5, now.Add(-time.Minute), now.Add(time.Hour), "admit 1/h")+
		roomBlock("later", 5, now.Add(time.Hour), now.Add(2*time.Hour), "opens 15m\nproof_of_work"),
		route+"metrics /metrics\n")
	c := newClient(t, base)
	alice, bob := token(t, "alice"), token(t, "bob")

	r := c.Get("/seckill/pow/queue/challenge", alice)
	expect(t, "alice's challenge", r, http.StatusOK, "ok")
	if r.Num("bits") != 8 || r.Num("expires_ms") <= time.Now().UnixMilli() || r.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("challenge: %s (Cache-Control %q); want 8 bits, expiring later, not cached", r, r.Header.Get("Cache-Control"))
	}
	ch := r.Str("challenge")
	good := waitroom.Solve(ch, 8)
	wrong := "0"
	for i := 1; waitroom.ProofBits(ch, wrong) >= 8; i++ {
		wrong = fmt.Sprint(i * 7919)
	}
	if r := c.Get("/seckill/later/queue/challenge", alice); r.Num("bits") != waitroom.DefaultProofBits {
		t.Errorf("a bare proof_of_work: %s; want %d bits", r, waitroom.DefaultProofBits)
	}

	for _, tc := range []struct {
		name, tok, body string
		status          int
		code            string
	}{
		{"no body", alice, "", http.StatusForbidden, "pow_required"},
		{"empty object", alice, "{}", http.StatusForbidden, "pow_required"},
		{"not JSON", alice, "{challenge", http.StatusBadRequest, "bad_request"},
		{"wrong answer", alice, proofBody(ch, wrong), http.StatusForbidden, "pow_invalid"},
		{"no answer", alice, proofBody(ch, ""), http.StatusForbidden, "pow_invalid"},
		{"forged challenge", alice, proofBody(strings.Replace(ch, ".8.", ".9.", 1), good), http.StatusForbidden, "pow_invalid"},
		{"alice's challenge for bob", bob, proofBody(ch, good), http.StatusForbidden, "pow_invalid"},
	} {
		expect(t, tc.name, c.Post("/seckill/pow/queue", tc.tok, tc.body), tc.status, tc.code)
	}
	// None of them took a place (nor spent alice's answer).
	expect(t, "alice's place after refusals", c.Get("/seckill/pow/queue", alice), http.StatusNotFound, "not_in_line")
	expect(t, "bob's place after refusals", c.Get("/seckill/pow/queue", bob), http.StatusNotFound, "not_in_line")

	r = c.Post("/seckill/pow/queue", alice, proofBody(ch, good))
	if r.Status != http.StatusOK || r.Str("state") != "admitted" || r.Num("position") != 1 {
		t.Fatalf("alice joins with her proof: %s; want admitted at 1", r)
	}
	expect(t, "alice's answer again", c.Post("/seckill/pow/queue", alice, proofBody(ch, good)), http.StatusConflict, "pow_spent")
	// A second join with a fresh proof keeps the first place.
	r = c.Post("/seckill/pow/queue", alice, proofBody(solveChallenge(t, c, "pow", alice)))
	if r.Status != http.StatusOK || r.Num("position") != 1 {
		t.Fatalf("alice joins again with a new proof: %s; want her place 1", r)
	}
	r = c.Post("/seckill/pow/queue", bob, proofBody(solveChallenge(t, c, "pow", bob)))
	if r.Status != http.StatusOK || r.Num("position") != 2 {
		t.Fatalf("bob joins: %s; want place 2", r)
	}
	// Polls need no proof; a room without proof_of_work has no challenge and takes no body.
	if r := c.Get("/seckill/pow/queue", bob); r.Status != http.StatusOK || r.Num("position") != 2 {
		t.Errorf("bob polls: %s", r)
	}
	expect(t, "challenge of a room without proof_of_work", c.Get("/seckill/free/queue/challenge", alice), http.StatusNotFound, "not_found")
	expect(t, "join of a room without proof_of_work", c.Post("/seckill/free/queue", alice, ""), http.StatusOK, "ok")
	expect(t, "challenge without a token", c.Get("/seckill/pow/queue/challenge", ""), http.StatusUnauthorized, "unauthorized")
	expect(t, "challenge by POST", c.Post("/seckill/pow/queue/challenge", alice, ""), http.StatusMethodNotAllowed, "method_not_allowed")
	// The line opens later: the join is refused before its proof is read or spent.
	expect(t, "join before opens", c.Post("/seckill/later/queue", alice, proofBody(solveChallenge(t, c, "later", alice))), http.StatusForbidden, "not_started")

	out := string(c.Get("/metrics", "").Raw)
	for series, want := range map[string]float64{
		`caddy_seckill_waiting_room_joins_total{activity="pow",result="pow_required"}`: 2,
		`caddy_seckill_waiting_room_joins_total{activity="pow",result="pow_invalid"}`:  4,
		`caddy_seckill_waiting_room_joins_total{activity="pow",result="pow_spent"}`:    1,
		`caddy_seckill_waiting_room_joins_total{activity="pow",result="bad_request"}`:  1,
		`caddy_seckill_waiting_room_joins_total{activity="pow",result="joined"}`:       2,
		`caddy_seckill_waiting_room_length{activity="pow"}`:                            2,
	} {
		if got := metricValue(t, out, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
}

// TestWaitingRoomProofOfWorkTwoGateways: a challenge one gateway issued is answered on the other
// (one key, derived from the activity's salt in the store), and the answer is spent for both
// (the spent set is in Redis, in the activity's hash tag).
func TestWaitingRoomProofOfWorkTwoGateways(t *testing.T) {
	bin := buildCaddy(t)
	rd := testsrv.StartRedis(t)
	now := time.Now()
	seckill := jwtBlock + "captcha off\nurl_secret shared-url-secret\nstore redis " + rd.Addr + "\n" +
		roomBlock("duo", 5, now.Add(-time.Minute), now.Add(time.Hour), "admit 1/h\nproof_of_work 6")
	a := newClient(t, startCaddy(t, seckill, route))
	b := newClient(t, startCaddyProcess(t, bin, seckill, route, "duo"))
	for i := range 5 {
		tok := token(t, fmt.Sprint("user", i))
		body := proofBody(solveChallenge(t, a, "duo", tok))
		r := b.Post("/seckill/duo/queue", tok, body)
		if r.Status != http.StatusOK || r.Num("position") != int64(i+1) {
			t.Fatalf("user%d joins on b with a's challenge: %s; want place %d", i, r, i+1)
		}
		expect(t, "the same answer on a", a.Post("/seckill/duo/queue", tok, body), http.StatusConflict, "pow_spent")
		expect(t, "the same answer on b", b.Post("/seckill/duo/queue", tok, body), http.StatusConflict, "pow_spent")
	}
}

// TestProofOfWorkConfig: proof_of_work's bounds are config errors at its line.
func TestProofOfWorkConfig(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct{ opt, want string }{
		{"proof_of_work 0", `proof_of_work "0": want 1 to 28 bits`},
		{"proof_of_work 29", `proof_of_work "29": want 1 to 28 bits`},
		{"proof_of_work x", `proof_of_work "x": want 1 to 28 bits`},
		{"proof_of_work 8 9", "wrong argument count"},
		{"proof_of_work\nproof_of_work 8", "proof_of_work"},
	} {
		err := loadCaddyfile(t, caddyfile(t, freePort(t), jwtBlock+"captcha off\n"+
			roomBlock("wr", 1, now.Add(-time.Minute), now.Add(time.Hour), tc.opt), route))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "Caddyfile:") {
			t.Errorf("%q: %v; want an error at its line with %q", tc.opt, err, tc.want)
		}
	}
}

// TestWaitingRoomProofExpired answers a challenge past its validity through Caddy: 403
// pow_expired (funnel layer waiting_room, counted), the line, the activity and the caller's place
// as they were. A challenge lives waitroom.ProofTTL (2 minutes) and the handler's clock is the
// wall's, so rather than wait the test issues the caller's challenges at earlier moments itself,
// signed with the room's key (derived from the activity's salt, as the handler derives it); one
// issued within the validity joins, which shows the key is the handler's, and its expiry is the
// only difference.
func TestWaitingRoomProofExpired(t *testing.T) {
	now := time.Now()
	base := startCaddy(t, jwtBlock+"captcha off\n"+
		roomBlock("old", 5, now.Add(-time.Minute), now.Add(time.Hour), "admit 1/h\nproof_of_work 6"), route+"metrics /metrics\n")
	c := newClient(t, base)
	alice := token(t, "alice")
	s, ok := snapshot(t, "old")
	if !ok {
		t.Fatal("activity old is not in the store")
	}
	key := waitroom.ProofKey(s.Salt)
	issued := func(at time.Time) string { return proofBody(issueSolved(t, key, "old", "alice", 6, at)) }

	line := tallies(t, []string{"old"})
	for _, ago := range []time.Duration{waitroom.ProofTTL + time.Millisecond, waitroom.ProofTTL + time.Minute, 24 * time.Hour} {
		r := c.Post("/seckill/old/queue", alice, issued(time.Now().Add(-ago)))
		expect(t, fmt.Sprintf("a challenge issued %s ago", ago), r, http.StatusForbidden, "pow_expired")
		if !strings.Contains(r.Str("message"), "expired") {
			t.Errorf("a challenge issued %s ago: %s; want a message saying it expired", ago, r)
		}
	}
	if after := tallies(t, []string{"old"}); fmt.Sprint(after) != fmt.Sprint(line) {
		t.Fatalf("the line after expired challenges: %v; before: %v", after, line)
	}
	if after, _ := snapshot(t, "old"); !reflect.DeepEqual(after, s) {
		t.Fatalf("the activity after expired challenges: %+v; before: %+v", after, s)
	}
	expect(t, "alice's place after expired challenges", c.Get("/seckill/old/queue", alice), http.StatusNotFound, "not_in_line")

	// The same key, issued a minute and a half ago: still valid, it joins.
	r := c.Post("/seckill/old/queue", alice, issued(time.Now().Add(-waitroom.ProofTTL+30*time.Second)))
	if r.Status != http.StatusOK || r.Num("position") != 1 {
		t.Fatalf("a challenge issued 90 s ago: %s; want alice joined at 1", r)
	}

	out := string(c.Get("/metrics", "").Raw)
	for series, want := range map[string]float64{
		`caddy_seckill_waiting_room_joins_total{activity="old",result="pow_expired"}`: 3,
		`caddy_seckill_waiting_room_joins_total{activity="old",result="joined"}`:      1,
	} {
		if got := metricValue(t, out, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	if got := metricValue(t, out, `caddy_seckill_rejected_total{layer="waiting_room"}`); got < 3 {
		t.Errorf(`rejected_total{layer="waiting_room"} = %v, want at least 3`, got)
	}
}
