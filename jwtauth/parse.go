package jwtauth

import (
	"bytes"
	"context"
	"crypto/hmac"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Verify used to hand every token to jwt.Parser.ParseWithClaims. That costs, per token, a map for
// the header, three copies of the base64 decoder (Encoding.Strict copies it on every call), a
// fresh HMAC with two hash states, and about forty allocations in all: on the buy path of a flash
// sale the token check was the largest part of the handler. parse runs the same steps in the same
// order with the same rules (TestParseMatchesLibrary compares the two), using the library's
// signing methods for the public-key algorithms and its Validator for the claims, but reading the
// header like the claims (tokenClaims), decoding into a reused buffer and checking HMACs with
// reused hash states.

// strictRawURL decodes segments as the library does with WithStrictDecoding: base64url without
// padding, and no spare bits set.
var strictRawURL = base64.RawURLEncoding.Strict()

// scratch is the reusable state of one verification: a buffer for the decoded segments and the
// text that is signed, and an HMAC state per HS* algorithm, keyed with the Verifier's secret.
type scratch struct {
	buf  []byte
	macs map[string]hash.Hash
}

// maxPooledScratch keeps a buffer grown by an unusually large token out of the pool.
const maxPooledScratch = 4 << 10

// tokenHeader is what verification reads from a token's header.
type tokenHeader struct {
	alg    string
	hasAlg bool // alg is present and a string
	kid    string

	// crit lists critical extensions; this package understands none, so any is a refusal
	// (RFC 7515 §4.1.11). unencoded is a b64 other than true (RFC 7797): the payload is then not
	// base64url claims, whatever it looks like.
	crit      bool
	unencoded bool
}

// headerMemo remembers the headers of the first tokens that verified: a token issuer writes the
// same header on every token (`{"alg":"HS256","typ":"JWT"}`, a kid per key), so on the buy path
// the header's decoding and reading is the same work each time. Only headers of tokens that
// passed every check are kept, so nobody without a signing key can fill its slots; once they are
// full (more headers than slots, or keys rotated without a reload), other headers are read as
// before. A header is a pure function of its segment's text, so a remembered one reads the same.
type headerMemo struct {
	slots [headerMemoSlots]atomic.Pointer[memoHeader]
}

// headerMemoSlots is how many distinct headers a Verifier remembers: one per signing key in use,
// with room for a rotation.
const headerMemoSlots = 4

type memoHeader struct {
	seg string
	hdr tokenHeader
}

// lookup returns the header of segment seg if it is remembered.
func (m *headerMemo) lookup(seg string) (tokenHeader, bool) {
	for i := range m.slots {
		e := m.slots[i].Load()
		if e == nil {
			break // slots fill in order
		}
		if e.seg == seg {
			return e.hdr, true
		}
	}
	return tokenHeader{}, false
}

// remember keeps hdr, read from segment seg of a token that verified, in a free slot if any. With
// every slot taken it allocates nothing: an issuer with more headers than slots pays no more per
// token than before the memo.
func (m *headerMemo) remember(seg string, hdr tokenHeader) {
	if len(seg) > maxMemoHeader {
		return
	}
	var e *memoHeader
	for i := range m.slots {
		cur := m.slots[i].Load()
		if cur == nil {
			if e == nil {
				e = &memoHeader{seg: strings.Clone(seg), hdr: hdr}
			}
			if m.slots[i].CompareAndSwap(nil, e) {
				return
			}
			cur = m.slots[i].Load() // taken meanwhile by another verification
		}
		if cur.seg == seg {
			return
		}
	}
}

// maxMemoHeader keeps unusually large headers (an embedded certificate chain) out of the memo.
const maxMemoHeader = 512

func malformed(what string, err error) error {
	if err == nil {
		return fmt.Errorf("%w: %s", jwt.ErrTokenMalformed, what)
	}
	return fmt.Errorf("%w: %s: %w", jwt.ErrTokenMalformed, what, err)
}

// parse verifies token and fills tc with its claims: the steps of jwt.Parser.ParseWithClaims
// (segments, header, claims, algorithm, signature, claims validation), in its order.
func (v *Verifier) parse(ctx context.Context, token string, tc *tokenClaims) error {
	head, rest, ok1 := strings.Cut(token, ".")
	payload, sigText, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || strings.Contains(sigText, ".") {
		return malformed("token contains an invalid number of segments", nil)
	}
	s := v.scratch.Get().(*scratch)
	defer func() {
		if cap(s.buf) <= maxPooledScratch {
			v.scratch.Put(s)
		}
	}()
	s.buf = s.buf[:0]

	hdr, known := v.headers.lookup(head)
	if !known {
		headerJSON, err := s.decode(head)
		if err != nil {
			return malformed("could not base64 decode header", err)
		}
		if hdr, err = readHeader(headerJSON); err != nil {
			return malformed("could not JSON decode header", err)
		}
	}
	// Before the claims are read: a token that asks for an extension this package does not
	// implement must not be read at all, let alone accepted.
	switch {
	case hdr.crit:
		return fmt.Errorf("%w: the header lists critical extensions (crit), and none is supported", jwt.ErrTokenUnverifiable)
	case hdr.unencoded:
		return fmt.Errorf("%w: an unencoded payload (b64 false) is not supported", jwt.ErrTokenUnverifiable)
	}
	claimsJSON, err := s.decode(payload)
	if err != nil {
		return malformed("could not base64 decode claim", err)
	}
	if err := decodeClaims(claimsJSON, tc); err != nil {
		return malformed("could not JSON decode claim", err)
	}
	// Every configured algorithm is one the library registers (TestAlgorithmsRegistered), so its
	// registry, a lock and a map, is asked only about the others.
	allowed := slices.Contains(v.algs, hdr.alg)
	switch {
	case !hdr.hasAlg:
		return fmt.Errorf("%w: signing method (alg) is unspecified", jwt.ErrTokenUnverifiable)
	case !allowed && jwt.GetSigningMethod(hdr.alg) == nil:
		return fmt.Errorf("%w: signing method (alg) is unavailable", jwt.ErrTokenUnverifiable)
	}
	sig, err := s.decode(sigText)
	if err != nil {
		return malformed("could not base64 decode signature", err)
	}
	if !allowed {
		return fmt.Errorf("%w: signing method %v is invalid", jwt.ErrTokenSignatureInvalid, hdr.alg)
	}
	signed := token[:len(head)+1+len(payload)]
	if algorithms[hdr.alg].family == famHMAC {
		if !s.hmacEqual(v, hdr.alg, signed, sig) {
			return fmt.Errorf("%w: %w", jwt.ErrTokenSignatureInvalid, jwt.ErrSignatureInvalid)
		}
	} else if err := v.verifyPublic(ctx, hdr, signed, bytes.Clone(sig)); err != nil {
		return err
	}
	if err := v.validate(tc); err != nil {
		return fmt.Errorf("%w: %w", jwt.ErrTokenInvalidClaims, err)
	}
	if !known {
		v.headers.remember(head, hdr) // signed by a configured key: not a header anyone can choose
	}
	tc.payload = payload
	return nil
}

// validate checks the claims as v.validator does. A good token's are checked here without
// allocating (the library's Validator makes a slice and a *jwt.NumericDate per time claim, and
// holds the claims behind an interface); any token these checks do not pass goes to the library,
// so that every refusal is its refusal, word for word.
func (v *Verifier) validate(tc *tokenClaims) error {
	if v.claimsValid(tc, time.Now()) {
		return nil
	}
	c := *tc // a copy escapes to the library, so that the caller's claims stay on its stack
	return v.validator.Validate(&c)
}

// claimsValid reports whether the claims pass every check of v.validator at now: exp present and
// after now, nbf and iat (when present) not after now, leeway given; iss and aud as configured.
// It may say false where the library accepts (then the library decides), never true where it
// refuses. It records exp's time in tc.expAt, for Verify's Claims.
func (v *Verifier) claimsValid(tc *tokenClaims, now time.Time) bool {
	exp, ok := tc.exp.at()
	tc.expAt = exp
	if !ok || !now.Before(exp.Add(v.leeway)) {
		return false
	}
	for _, n := range [...]numericClaim{tc.nbf, tc.iat} {
		if n.invalid {
			return false
		}
		if t, ok := n.at(); ok && now.Before(t.Add(-v.leeway)) {
			return false
		}
	}
	if v.issuer != "" && (tc.iss.invalid || tc.iss.v != v.issuer) {
		return false
	}
	if v.audience != "" && (tc.aud.invalid || !slices.Contains(tc.aud.v, v.audience)) {
		return false
	}
	return true
}

// decode appends the base64url decoding of seg to the buffer and returns it. The text is copied
// into the buffer first: the decoder wants bytes, and converting the string would allocate.
func (s *scratch) decode(seg string) ([]byte, error) {
	n := strictRawURL.DecodedLen(len(seg))
	start := len(s.buf)
	s.buf = append(s.buf, seg...)
	s.buf = slices.Grow(s.buf, n)
	out := s.buf[start+len(seg) : start+len(seg)+n]
	m, err := strictRawURL.Decode(out, s.buf[start:start+len(seg)])
	if err != nil {
		s.buf = s.buf[:start]
		return nil, err
	}
	// Keep only the decoded bytes: move them over the text.
	copy(s.buf[start:], out[:m])
	s.buf = s.buf[:start+m]
	return s.buf[start : start+m : start+m], nil
}

// hmacEqual reports whether sig is the HMAC of signed under the Verifier's secret, as
// jwt.SigningMethodHMAC.Verify decides it.
func (s *scratch) hmacEqual(v *Verifier, alg string, signed string, sig []byte) bool {
	m := s.macs[alg]
	if m == nil {
		if s.macs == nil {
			s.macs = make(map[string]hash.Hash, 1)
		}
		m = hmac.New(jwt.GetSigningMethod(alg).(*jwt.SigningMethodHMAC).Hash.New, v.secret)
		s.macs[alg] = m
	}
	m.Reset()
	start := len(s.buf)
	s.buf = append(s.buf, signed...)
	m.Write(s.buf[start:])
	s.buf = m.Sum(s.buf)
	sum := s.buf[len(s.buf)-m.Size():]
	return hmac.Equal(sig, sum)
}

// verifyPublic checks a public-key signature with the library's signing method, against every key
// that may have made it (Verifier.keys), as the parser does with a VerificationKeySet.
func (v *Verifier) verifyPublic(ctx context.Context, hdr tokenHeader, signed string, sig []byte) error {
	keys, err := v.keys(ctx, hdr.alg, hdr.kid)
	if err != nil {
		return fmt.Errorf("%w: error while executing keyfunc: %w", jwt.ErrTokenUnverifiable, err)
	}
	method := jwt.GetSigningMethod(hdr.alg)
	for _, k := range keys {
		if err = method.Verify(signed, sig, k); err == nil {
			return nil
		}
	}
	return fmt.Errorf("%w: %w", jwt.ErrTokenSignatureInvalid, err)
}

// errHeaderSyntax is returned for a header that is not JSON, or not a JSON object.
var errHeaderSyntax = errors.New("header is not a JSON object")

// readHeader reads alg and kid from a header as the library reads them from the map it decodes
// the header into: the header must be JSON, an object or null (then nothing is in it); alg counts
// only as a string, kid is "" unless a string; a repeated member counts by its last value. A crit
// member of any value, and a b64 member other than true, are noted wherever they appear.
func readHeader(data []byte) (tokenHeader, error) {
	var h tokenHeader
	if !json.Valid(data) {
		return h, errHeaderSyntax
	}
	if string(bytes.TrimSpace(data)) == "null" {
		return h, nil
	}
	err := walkObject(data, func(key, val []byte) error {
		switch string(key) {
		case "alg":
			s, err := stringValue(val)
			h.alg, h.hasAlg = s.v, !s.invalid
			return err
		case "kid":
			s, err := stringValue(val)
			h.kid = s.v
			return err
		case "crit":
			h.crit = true
		case "b64":
			if string(val) != "true" {
				h.unencoded = true
			}
		}
		return nil
	})
	if err != nil {
		return tokenHeader{}, err
	}
	return h, nil
}

// decodeClaims fills tc from the claims JSON as json.Unmarshal into the parser's claims does:
// valid JSON only; null leaves the claims empty.
func decodeClaims(data []byte, tc *tokenClaims) error {
	if !json.Valid(data) {
		return errClaimsSyntax
	}
	if string(bytes.TrimSpace(data)) == "null" {
		return nil
	}
	return tc.UnmarshalJSON(data)
}

// newScratchPool returns the pool of a Verifier's scratch states.
func newScratchPool() *sync.Pool {
	return &sync.Pool{New: func() any { return &scratch{buf: make([]byte, 0, 1024)} }}
}
