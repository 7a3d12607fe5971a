// Package hashedurl makes the per-user secret path segment of a buy URL: a buyer can only buy
// through a path the edge handed out to them (after the captcha, not before the reveal time), and
// the edge checks it with no store call.
package hashedurl

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"hash"
	"sync"
)

// HashLen is the length of a hash made by Sign: 32 bytes in unpadded base64url.
const HashLen = (sha256.Size*8 + 5) / 6

// domain separates these MACs from anything else computed with the same secret.
const domain = "caddy-seckill/hashedurl/v1"

// Every path and buy call signs or verifies one hash, so a Key keeps keyed HMAC states in a pool
// (as jwtauth/parse.go does for tokens): hmac.New costs two SHA-256 states and the padded key,
// and hashes both key blocks, where a pooled state's Reset restores the keyed states it saved.
// The MAC input is built in the state's buffer and written at once, the encoding goes to a stack
// array and is compared there: Verify allocates nothing, Sign only its string (16 allocations per
// call before, through hmac.New, the field conversions and the encoding).

// Key signs and verifies hashes under one secret. It is safe for concurrent use; keep one per
// secret rather than calling the package's Sign and Verify, which build a Key each time.
type Key struct {
	secret []byte
	states sync.Pool // of *state, keyed with secret
}

// state is the reusable part of one signature: an HMAC keyed with the Key's secret, the MAC
// input and the sum.
type state struct {
	mac hash.Hash
	buf []byte
	sum [sha256.Size]byte
}

// maxPooledInput keeps a buffer grown by unusually long fields out of the pool.
const maxPooledInput = 1 << 10

// NewKey returns a Key for secret, which should be at least 32 random bytes. The Key keeps secret
// (not a copy): do not modify it afterwards. Under an empty secret nothing verifies, so that a
// missing configuration fails closed.
func NewKey(secret []byte) *Key {
	k := &Key{secret: secret}
	k.states.New = func() any { return &state{mac: hmac.New(sha256.New, k.secret)} }
	return k
}

// mac computes HMAC-SHA256(secret, domain, activity, user, salt) into a stack array, each field
// length-prefixed so that no two field lists ("ab","c") and ("a","bc") share a MAC.
func (k *Key) mac(activity, user, salt string) [sha256.Size]byte {
	st := k.states.Get().(*state)
	b := st.buf[:0]
	for _, f := range [...]string{domain, activity, user, salt} {
		b = binary.BigEndian.AppendUint64(b, uint64(len(f)))
		b = append(b, f...)
	}
	st.mac.Reset()
	st.mac.Write(b)
	sum := [sha256.Size]byte(st.mac.Sum(st.sum[:0]))
	if cap(b) <= maxPooledInput {
		st.buf = b
		k.states.Put(st)
	}
	return sum
}

// encode returns the canonical spelling of a MAC: unpadded base64url.
func encode(sum [sha256.Size]byte) [HashLen]byte {
	var e [HashLen]byte
	base64.RawURLEncoding.Encode(e[:], sum[:])
	return e
}

// Sign returns the path segment for user in activity: base64url (no padding) of
// HMAC-SHA256(secret, activity, user, salt), each field length-prefixed. The salt is the
// activity's own secret salt, so a leaked path is worthless in another activity or after the salt
// changes.
func (k *Key) Sign(activity, user, salt string) string {
	e := encode(k.mac(activity, user, salt))
	return string(e[:])
}

// AppendSign appends Sign(activity, user, salt) to dst and returns the extended slice, so that a
// caller building a path around the hash allocates once.
func (k *Key) AppendSign(dst []byte, activity, user, salt string) []byte {
	e := encode(k.mac(activity, user, salt))
	return append(dst, e[:]...)
}

// Verify reports whether hash is Sign(activity, user, salt), comparing in constant time. A hash
// of the wrong length or alphabet is false; so is anything under an empty secret.
func (k *Key) Verify(activity, user, salt, hash string) bool {
	if len(k.secret) == 0 || len(hash) != HashLen {
		return false
	}
	// Comparing the canonical encodings, not decoded bytes: base64 leaves spare bits in the last
	// character, and decoding would accept several spellings of one MAC. The copy keeps the
	// comparison off the heap ([]byte(hash) of 43 bytes would allocate).
	want := encode(k.mac(activity, user, salt))
	var got [HashLen]byte
	copy(got[:], hash)
	return subtle.ConstantTimeCompare(want[:], got[:]) == 1
}

// Sign returns the path segment for user in activity under secret; see Key.Sign. It builds a Key
// for this one call: a server keeps a Key.
func Sign(secret []byte, activity, user, salt string) string {
	return NewKey(secret).Sign(activity, user, salt)
}

// Verify reports whether hash is Sign(secret, activity, user, salt); see Key.Verify. It builds a
// Key for this one call: a server keeps a Key.
func Verify(secret []byte, activity, user, salt, hash string) bool {
	return NewKey(secret).Verify(activity, user, salt, hash)
}
