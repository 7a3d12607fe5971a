// Package hashedurl makes the per-user secret path segment of a buy URL: a buyer can only buy
// through a path the edge handed out to them (after the captcha, not before the reveal time), and
// the edge checks it with no store call.
package hashedurl

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"hash"
)

// HashLen is the length of a hash made by Sign: 32 bytes in unpadded base64url.
const HashLen = (sha256.Size*8 + 5) / 6

// domain separates these MACs from anything else computed with the same secret.
const domain = "caddy-seckill/hashedurl/v1"

// Sign returns the path segment for user in activity: base64url (no padding) of
// HMAC-SHA256(secret, activity, user, salt), each field length-prefixed so that no two field
// lists ("ab","c") and ("a","bc") share a MAC. The secret should be at least 32 random bytes; the
// salt is the activity's own secret salt, so a leaked path is worthless in another activity or
// after the salt changes.
func Sign(secret []byte, activity, user, salt string) string {
	m := hmac.New(sha256.New, secret)
	for _, f := range [...]string{domain, activity, user, salt} {
		writeField(m, f)
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func writeField(h hash.Hash, s string) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(s)))
	h.Write(n[:])
	h.Write([]byte(s))
}

// Verify reports whether hash is Sign(secret, activity, user, salt), comparing in constant time.
// A hash of the wrong length or alphabet is false; so is anything under an empty secret, so that a
// missing configuration fails closed.
func Verify(secret []byte, activity, user, salt, hash string) bool {
	if len(secret) == 0 || len(hash) != HashLen {
		return false
	}
	// Comparing the canonical encodings, not decoded bytes: base64 leaves spare bits in the last
	// character, and decoding would accept several spellings of one MAC.
	return hmac.Equal([]byte(Sign(secret, activity, user, salt)), []byte(hash))
}
