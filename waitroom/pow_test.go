package waitroom_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/waitroom"
)

func TestProofOfWork(t *testing.T) {
	key := waitroom.ProofKey("salt")
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	c, err := waitroom.NewChallenge(key, "act", "alice", 8, now)
	if err != nil {
		t.Fatal(err)
	}
	if c.Bits != 8 || !c.Expires.Equal(now.Add(waitroom.ProofTTL)) {
		t.Fatalf("challenge %+v", c)
	}
	a := waitroom.Solve(c.Token, 8)
	tk, err := waitroom.CheckProof(key, "act", "alice", 8, c.Token, a, now.Add(time.Minute))
	if err != nil || tk.ID == "" || !tk.Expires.Equal(c.Expires) {
		t.Fatalf("a solved challenge: %+v, %v", tk, err)
	}
	if c2, _ := waitroom.NewChallenge(key, "act", "alice", 8, now); c2.Token == c.Token {
		t.Fatal("two challenges are the same")
	}

	// A wrong answer: the first one that does not solve it.
	wrong := "0"
	for i := 0; waitroom.ProofBits(c.Token, wrong) >= 8; i++ {
		wrong = strings.Repeat("1", i+1)
	}
	other, _ := waitroom.NewChallenge(waitroom.ProofKey("other salt"), "act", "alice", 8, now)
	for _, tc := range []struct {
		name, activity, user, token, answer string
		min                                 int
		at                                  time.Time
		want                                error
	}{
		{"wrong answer", "act", "alice", c.Token, wrong, 8, now, waitroom.ErrProofInvalid},
		{"another user", "act", "bob", c.Token, a, 8, now, waitroom.ErrProofInvalid},
		{"another activity", "act2", "alice", c.Token, a, 8, now, waitroom.ErrProofInvalid},
		{"another key", "act", "alice", other.Token, waitroom.Solve(other.Token, 8), 8, now, waitroom.ErrProofInvalid},
		{"fewer bits than required", "act", "alice", c.Token, a, 9, now, waitroom.ErrProofInvalid},
		{"bits raised in the token", "act", "alice", strings.Replace(c.Token, ".8.", ".9.", 1), a, 8, now, waitroom.ErrProofInvalid},
		{"garbage", "act", "alice", "garbage", a, 8, now, waitroom.ErrProofInvalid},
		{"empty", "act", "alice", "", "", 8, now, waitroom.ErrProofInvalid},
		{"answer not digits", "act", "alice", c.Token, "12a", 8, now, waitroom.ErrProofInvalid},
		{"answer too long", "act", "alice", c.Token, strings.Repeat("1", 21), 8, now, waitroom.ErrProofInvalid},
		{"expired", "act", "alice", c.Token, a, 8, c.Expires, waitroom.ErrProofExpired},
	} {
		if _, err := waitroom.CheckProof(key, tc.activity, tc.user, tc.min, tc.token, tc.answer, tc.at); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	for _, bad := range []int{0, 29} {
		if _, err := waitroom.NewChallenge(key, "act", "alice", bad, now); err == nil {
			t.Errorf("a challenge of %d bits", bad)
		}
	}
}

// TestProofBitsCost checks that the work is the advertised one: over many challenges, the mean
// number of hashes to find 6 zero bits is 2^6 within a wide bound.
func TestProofBitsCost(t *testing.T) {
	key := waitroom.ProofKey("salt")
	now := time.Now()
	const n, bits = 400, 6
	total := 0
	for range n {
		c, err := waitroom.NewChallenge(key, "act", "alice", bits, now)
		if err != nil {
			t.Fatal(err)
		}
		a := waitroom.Solve(c.Token, bits)
		var k int
		for i := 0; ; i++ {
			if waitroom.ProofBits(c.Token, strconv.Itoa(i)) >= bits {
				k = i + 1
				break
			}
		}
		if strconv.Itoa(k-1) != a {
			t.Fatalf("Solve %s, first answer %d", a, k-1)
		}
		total += k
	}
	// The tries are geometric with p = 1/64: mean 64, standard deviation of the mean about 3.2;
	// 64 ± 20 is over 6 standard deviations.
	if mean := float64(total) / n; mean < 44 || mean > 84 {
		t.Fatalf("mean tries %.1f for %d bits, want about %d", mean, bits, 1<<bits)
	}
}
