package jwtauth

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// memoSegs lists the header segments v remembers, in slot order.
func memoSegs(v *Verifier) []string {
	var segs []string
	for i := range v.headers.slots {
		if e := v.headers.slots[i].Load(); e != nil {
			segs = append(segs, e.seg)
		}
	}
	return segs
}

// TestHeaderMemo checks that a Verifier remembers only the headers of tokens that verified, that
// a remembered header decides as it did when it was read, and that headers past the memo's slots
// still verify.
func TestHeaderMemo(t *testing.T) {
	v := mustNew(t, Config{Algorithms: []string{"HS256"}, HMACSecret: secret})
	exp := time.Now().Add(time.Hour).Unix()
	claims := fmt.Sprintf(`{"sub":"alice","exp":%d}`, exp)
	ctx := context.Background()

	// Refused tokens leave nothing behind: a bad signature, an expired token, an unknown alg.
	forged := hmacToken(`{"alg":"HS256","x":1}`, claims)
	forged = forged[:strings.LastIndex(forged, ".")+1] + "AAAA"
	refused := []string{
		forged,
		hmacToken(`{"alg":"HS256","x":2}`, fmt.Sprintf(`{"sub":"alice","exp":%d}`, time.Now().Add(-time.Hour).Unix())),
		hmacToken(`{"alg":"HS384"}`, claims),
		hmacToken(`{"alg":"HS256","crit":["x"]}`, claims),
	}
	for _, tok := range refused {
		if _, err := v.Verify(ctx, tok); !errors.Is(err, ErrUnauthorized) {
			t.Fatalf("%s: err %v, want ErrUnauthorized", tok, err)
		}
	}
	if segs := memoSegs(v); len(segs) != 0 {
		t.Fatalf("refused tokens filled the memo: %q", segs)
	}

	// A verified token's header is remembered once, and its next tokens verify from the memo.
	header := `{"alg":"HS256","typ":"JWT"}`
	for range 3 {
		c, err := v.Verify(ctx, hmacToken(header, claims))
		if err != nil || c.User != "alice" {
			t.Fatalf("verify: %v, %+v", err, c)
		}
	}
	if segs := memoSegs(v); len(segs) != 1 || segs[0] != base64.RawURLEncoding.EncodeToString([]byte(header)) {
		t.Fatalf("memo %q, want the one header", segs)
	}
	// The memo keeps the header, not the verdict: a remembered header with a bad signature, or
	// claims that fail, is refused as before.
	good := hmacToken(header, claims)
	bad := good[:strings.LastIndex(good, ".")+1] + "AAAA"
	if _, err := v.Verify(ctx, bad); !errors.Is(err, jwt.ErrTokenSignatureInvalid) {
		t.Fatalf("bad signature under a remembered header: %v", err)
	}
	if _, err := v.Verify(ctx, hmacToken(header, `{"sub":"alice"}`)); !errors.Is(err, jwt.ErrTokenRequiredClaimMissing) {
		t.Fatalf("no exp under a remembered header: %v", err)
	}

	// More headers than slots: every one still verifies, the memo holds the first four.
	for i := range 2 * headerMemoSlots {
		h := fmt.Sprintf(`{"alg":"HS256","kid":"k%d"}`, i)
		if _, err := v.Verify(ctx, hmacToken(h, claims)); err != nil {
			t.Fatalf("header %d: %v", i, err)
		}
	}
	if segs := memoSegs(v); len(segs) != headerMemoSlots {
		t.Fatalf("memo holds %d headers, want %d", len(segs), headerMemoSlots)
	}
}

// TestHeaderMemoConcurrent verifies tokens under a few headers from many goroutines (run with
// -race): each header is remembered at most once, and every verification answers as alone.
func TestHeaderMemoConcurrent(t *testing.T) {
	v := mustNew(t, Config{Algorithms: []string{"HS256"}, HMACSecret: secret})
	exp := time.Now().Add(time.Hour).Unix()
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 50 {
				user := fmt.Sprintf("u%d-%d", g, i)
				tok := hmacToken(fmt.Sprintf(`{"alg":"HS256","kid":"k%d"}`, i%3), fmt.Sprintf(`{"sub":%q,"exp":%d}`, user, exp))
				c, err := v.Verify(context.Background(), tok)
				if err != nil || c.User != user {
					t.Errorf("verify %s: %v, %+v", user, err, c)
					return
				}
			}
		})
	}
	wg.Wait()
	segs := memoSegs(v)
	seen := map[string]bool{}
	for _, s := range segs {
		if seen[s] {
			t.Fatalf("header remembered twice: %q", segs)
		}
		seen[s] = true
	}
	if len(segs) != 3 {
		t.Fatalf("memo holds %d headers, want the 3 in use", len(segs))
	}
}

// TestHeaderMemoFullAllocatesNothing: once every slot is taken, remembering another header (which
// each verified token under it asks for) costs no allocation.
func TestHeaderMemoFullAllocatesNothing(t *testing.T) {
	var m headerMemo
	for i := range headerMemoSlots {
		m.remember(fmt.Sprintf("seg%d", i), tokenHeader{alg: "HS256", hasAlg: true})
	}
	if allocs := testing.AllocsPerRun(100, func() { m.remember("another", tokenHeader{alg: "HS256", hasAlg: true}) }); allocs != 0 {
		t.Fatalf("remember on a full memo: %v allocations, want 0", allocs)
	}
	if _, ok := m.lookup("another"); ok {
		t.Fatal("a header past the slots was remembered")
	}
}
