//go:build !race

package jwtauth

import (
	"context"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// The race detector allocates on its own (and empties sync.Pools at random), so this runs without it.

// TestVerifyAllocations pins what verifying a good HS256 token allocates, on every buy: the error
// wrapping and the library's Validator are only for tokens that fail. Today that is the user
// string alone (the default user claim "sub"), which outlives the pooled decoding buffer; an iss
// or aud in the token adds its own strings.
func TestVerifyAllocations(t *testing.T) {
	v := mustNew(t, Config{Algorithms: []string{"HS256"}, HMACSecret: secret})
	tok := sign(t, jwt.SigningMethodHS256, secret, claims(map[string]any{"sub": "a-rather-long-user-id-from-a-jwt", "nbf": 1}), "")
	ctx := context.Background()
	if _, err := v.Verify(ctx, tok); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(1000, func() {
		if c, err := v.Verify(ctx, tok); err != nil || c.User == "" {
			t.Fatalf("verify: %v", err)
		}
	}); n > 1 {
		t.Errorf("verifying a good token allocates %.1f times, want at most 1", n)
	}
}
