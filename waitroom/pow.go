package waitroom

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Proof of work: an optional toll to join a line. The gateway hands out a stateless challenge,
// signed with a key derived from the activity's secret salt (so every gateway of a sale checks
// what any other issued) and bound to the activity and the user; the joiner finds an answer such
// that SHA-256(challenge ":" answer) starts with Bits zero bits (2^Bits hashes on average), and
// a spent set in the store (ProofID until the challenge expires) keeps any answer from being
// used twice.
const (
	DefaultProofBits = 16
	MinProofBits     = 1
	MaxProofBits     = 28
	// ProofTTL is a challenge's lifetime: long enough for a phone to solve MaxProofBits, short
	// enough that the spent set stays small.
	ProofTTL = 2 * time.Minute
	// maxAnswer bounds an answer's length: 20 decimal digits hold any uint64.
	maxAnswer = 20
)

// Errors of CheckProof, on which the caller picks its answer.
var (
	// ErrProofInvalid is a challenge that is malformed, not signed for this activity and user,
	// asks fewer bits than required, or an answer that does not meet it.
	ErrProofInvalid = errors.New("invalid proof of work")
	// ErrProofExpired is a genuine challenge past its expiry.
	ErrProofExpired = errors.New("proof of work challenge expired")
)

// Challenge is a proof-of-work challenge as the client receives it.
type Challenge struct {
	Token   string    // what the client hashes, and sends back with its answer
	Bits    int       // leading zero bits the hash must have
	Expires time.Time // after this the answer is refused
}

// Ticket is a checked proof: ID goes in the spent set until Expires.
type Ticket struct {
	ID      string
	Expires time.Time
}

// ProofKey derives the challenges' signing key from an activity's secret salt, apart from the
// lottery's use of the same salt.
func ProofKey(salt string) []byte {
	m := hmac.New(sha256.New, []byte(salt))
	m.Write([]byte("waitroom proof-of-work key"))
	return m.Sum(nil)
}

// NewChallenge returns a challenge of bits for user in activity, issued at now. The token is
// "<expires_ms>.<bits>.<nonce>.<mac>": the nonce (16 random bytes) makes each challenge unique,
// the MAC binds it to the activity and the user.
func NewChallenge(key []byte, activity, user string, bits int, now time.Time) (Challenge, error) {
	if bits < MinProofBits || bits > MaxProofBits {
		return Challenge{}, fmt.Errorf("proof of work: %d bits: want %d to %d", bits, MinProofBits, MaxProofBits)
	}
	var nonce [16]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return Challenge{}, fmt.Errorf("proof of work: nonce: %w", err)
	}
	exp := now.Add(ProofTTL).Truncate(time.Millisecond)
	body := strconv.FormatInt(exp.UnixMilli(), 10) + "." + strconv.Itoa(bits) + "." +
		base64.RawURLEncoding.EncodeToString(nonce[:])
	return Challenge{Token: body + "." + proofMAC(key, activity, user, body), Bits: bits, Expires: exp}, nil
}

// CheckProof checks answer to token for user in activity at now, the challenge asking at least
// minBits: ErrProofInvalid or ErrProofExpired, or the ticket to spend. It is stateless: the
// caller spends the ticket so the answer is not used twice.
func CheckProof(key []byte, activity, user string, minBits int, token, answer string, now time.Time) (Ticket, error) {
	body, mac, ok := cutLast(token)
	if !ok || !hmac.Equal([]byte(mac), []byte(proofMAC(key, activity, user, body))) {
		return Ticket{}, fmt.Errorf("%w: the challenge was not issued to you for this activity", ErrProofInvalid)
	}
	f := strings.Split(body, ".")
	if len(f) != 3 {
		return Ticket{}, fmt.Errorf("%w: malformed challenge", ErrProofInvalid)
	}
	expMS, err1 := strconv.ParseInt(f[0], 10, 64)
	n, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		return Ticket{}, fmt.Errorf("%w: malformed challenge", ErrProofInvalid)
	}
	if n < minBits {
		return Ticket{}, fmt.Errorf("%w: the challenge asks %d bits, %d are required", ErrProofInvalid, n, minBits)
	}
	exp := time.UnixMilli(expMS)
	if !now.Before(exp) {
		return Ticket{}, fmt.Errorf("%w at %s: ask for a new one", ErrProofExpired, exp.UTC().Format(time.RFC3339))
	}
	if !validAnswer(answer) {
		return Ticket{}, fmt.Errorf("%w: the answer must be 1 to %d decimal digits", ErrProofInvalid, maxAnswer)
	}
	if ProofBits(token, answer) < n {
		return Ticket{}, fmt.Errorf("%w: the answer does not solve the challenge", ErrProofInvalid)
	}
	return Ticket{ID: f[2], Expires: exp}, nil
}

// ProofBits returns the leading zero bits of SHA-256(token ":" answer).
func ProofBits(token, answer string) int {
	h := sha256.New()
	h.Write([]byte(token))
	h.Write([]byte{':'})
	h.Write([]byte(answer))
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	z := 0
	for _, b := range sum {
		if b != 0 {
			return z + bits.LeadingZeros8(b)
		}
		z += 8
	}
	return z
}

// Solve finds the smallest answer to token with at least n zero bits, as a client does (tests
// and tools; the sale page solves in the browser, web/pow.js).
func Solve(token string, n int) string {
	for i := uint64(0); ; i++ {
		a := strconv.FormatUint(i, 10)
		if ProofBits(token, a) >= n {
			return a
		}
	}
}

func proofMAC(key []byte, activity, user, body string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(activity))
	m.Write([]byte{0})
	m.Write([]byte(user))
	m.Write([]byte{0})
	m.Write([]byte(body))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// cutLast splits s at its last dot.
func cutLast(s string) (before, after string, ok bool) {
	i := strings.LastIndexByte(s, '.')
	if i < 0 {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

func validAnswer(a string) bool {
	if a == "" || len(a) > maxAnswer {
		return false
	}
	for i := 0; i < len(a); i++ {
		if a[i] < '0' || a[i] > '9' {
			return false
		}
	}
	return true
}
