package jwtauth

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Claims are a verified token's claims.
type Claims struct {
	User      string // the UserClaim
	ExpiresAt time.Time

	payload string // the token's claims segment (base64url), decoded only by Map
}

// Map decodes every claim of the token as encoding/json decodes a JSON object into a
// map[string]any (numbers as float64). It decodes on each call: Verify itself reads only the
// claims it checks, so that a request that never looks at the others does not pay for them.
func (c Claims) Map() (map[string]any, error) {
	if c.payload == "" {
		return nil, errors.New("no verified token")
	}
	b, err := strictRawURL.DecodeString(c.payload)
	if err != nil {
		return nil, fmt.Errorf("decode claims: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode claims: %w", err)
	}
	return m, nil
}

// tokenClaims are the claims Verify reads and hands the library's Validator (a jwt.Claims).
// Instead of decoding the whole payload into a map (jwt.MapClaims), which was the largest part of
// verifying a token, it reads only the members a verification uses (exp, nbf, iat, iss, sub, aud
// and the user claim) straight from the JSON, with MapClaims's rules for their types, and skips
// the others. What it accepts and refuses is what MapClaims accepts and refuses
// (TestTokenClaimsMatchMapClaims):
//
//   - exp, nbf, iat: a number (0 counts as absent); any other type, null included, is invalid;
//   - iss, sub: a string; any other type is invalid;
//   - aud: a string or an array of strings; an array holding anything else is invalid, and any
//     other type counts as no audience;
//   - the user claim: a string, or no user;
//   - a member repeated: the last one counts, as in a map;
//   - a number anywhere in the payload beyond float64's range fails the whole payload, as it
//     fails encoding/json's decoding into a map.
type tokenClaims struct {
	userClaim string

	exp, nbf, iat numericClaim
	iss, sub      stringClaim
	aud           audClaim
	user          string
	hasUser       bool

	expAt   time.Time // exp as a time (zero when unusable), set by claimsValid: converted once
	payload string    // the token's claims segment, set by parse once the token verified
}

type numericClaim struct {
	present, invalid bool
	v                float64
}

type stringClaim struct {
	present, invalid bool
	v                string
}

type audClaim struct {
	invalid bool
	v       jwt.ClaimStrings
}

var _ jwt.Claims = (*tokenClaims)(nil)

// GetExpirationTime implements jwt.Claims.
func (c *tokenClaims) GetExpirationTime() (*jwt.NumericDate, error) { return c.exp.date("exp") }

// GetNotBefore implements jwt.Claims.
func (c *tokenClaims) GetNotBefore() (*jwt.NumericDate, error) { return c.nbf.date("nbf") }

// GetIssuedAt implements jwt.Claims.
func (c *tokenClaims) GetIssuedAt() (*jwt.NumericDate, error) { return c.iat.date("iat") }

// GetIssuer implements jwt.Claims.
func (c *tokenClaims) GetIssuer() (string, error) { return c.iss.get("iss") }

// GetSubject implements jwt.Claims.
func (c *tokenClaims) GetSubject() (string, error) { return c.sub.get("sub") }

// GetAudience implements jwt.Claims.
func (c *tokenClaims) GetAudience() (jwt.ClaimStrings, error) {
	if c.aud.invalid {
		return nil, invalidClaim("aud")
	}
	return c.aud.v, nil
}

func invalidClaim(name string) error {
	return fmt.Errorf("%s is invalid: %w", name, jwt.ErrInvalidType)
}

// date converts seconds since the epoch as jwt.MapClaims does (whole seconds: jwt.TimePrecision).
func (n numericClaim) date(name string) (*jwt.NumericDate, error) {
	if n.invalid {
		return nil, invalidClaim(name)
	}
	t, ok := n.at()
	if !ok {
		return nil, nil
	}
	return jwt.NewNumericDate(t), nil
}

// at is date's time without the allocation of a *jwt.NumericDate: false when the claim is absent,
// invalid or 0.
func (n numericClaim) at() (time.Time, bool) {
	if !n.present || n.invalid || n.v == 0 {
		return time.Time{}, false
	}
	round, frac := math.Modf(n.v)
	return time.Unix(int64(round), int64(frac*1e9)).Truncate(jwt.TimePrecision), true
}

func (s stringClaim) get(name string) (string, error) {
	if s.invalid {
		return "", invalidClaim(name)
	}
	return s.v, nil
}

// errClaimsSyntax is returned for a payload that is not a JSON object. UnmarshalJSON is only
// handed JSON that encoding/json has validated (decodeClaims), so past its type this is a
// defence, not a code path.
var errClaimsSyntax = errors.New("claims are not a JSON object")

// UnmarshalJSON reads the members Verify uses from the JSON object data.
func (c *tokenClaims) UnmarshalJSON(data []byte) error {
	*c = tokenClaims{userClaim: c.userClaim}
	return walkObject(data, c.member)
}

// walkObject calls fn with the key and the raw value of each member of the JSON object data, in
// order, and checks the range of every number in it. It expects JSON that encoding/json has
// validated; whatever else it is given, it refuses without panicking.
func walkObject(data []byte, fn func(key, val []byte) error) error {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return errClaimsSyntax
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return trailing(data, i+1)
	}
	for {
		kEnd, err := scanString(data, i)
		if err != nil {
			return err
		}
		key, err := unquoteBytes(data[i:kEnd])
		if err != nil {
			return err
		}
		i = skipSpace(data, kEnd)
		if i >= len(data) || data[i] != ':' {
			return errClaimsSyntax
		}
		i = skipSpace(data, i+1)
		vEnd, err := skipValue(data, i, 0)
		if err != nil {
			return err
		}
		if err := fn(key, data[i:vEnd]); err != nil {
			return err
		}
		i = skipSpace(data, vEnd)
		if i >= len(data) {
			return errClaimsSyntax
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			return trailing(data, i+1)
		default:
			return errClaimsSyntax
		}
	}
}

// member records one member of the payload; val is its raw value.
func (c *tokenClaims) member(key, val []byte) (err error) {
	if string(key) == c.userClaim {
		s, err := stringValue(val) // a string, or no user
		if err != nil {
			return err
		}
		c.user, c.hasUser = s.v, !s.invalid
		if string(key) == "sub" { // the default user claim: the same string, not a second copy
			c.sub = s
			return nil
		}
	}
	switch string(key) {
	case "exp":
		c.exp, err = numeric(val)
	case "nbf":
		c.nbf, err = numeric(val)
	case "iat":
		c.iat, err = numeric(val)
	case "iss":
		c.iss, err = stringValue(val)
	case "sub":
		c.sub, err = stringValue(val)
	case "aud":
		c.aud, err = audience(val)
	}
	return err
}

func numeric(val []byte) (numericClaim, error) {
	if !isNumber(val[0]) {
		return numericClaim{present: true, invalid: true}, nil
	}
	f, err := parseNumber(val)
	return numericClaim{present: true, v: f}, err
}

// stringValue reads a member that counts only as a string (iss, sub, the user claim, the header's
// alg and kid): any other type is present but invalid, and its value "".
func stringValue(val []byte) (stringClaim, error) {
	if val[0] != '"' {
		return stringClaim{present: true, invalid: true}, nil
	}
	s, err := unquote(val)
	return stringClaim{present: true, v: s}, err
}

// audience follows jwt.MapClaims: a string or an array of strings; any other type is no audience.
func audience(val []byte) (audClaim, error) {
	switch val[0] {
	case '"':
		s, err := unquote(val)
		return audClaim{v: jwt.ClaimStrings{s}}, err
	case '[':
		var arr []any
		if err := json.Unmarshal(val, &arr); err != nil {
			return audClaim{}, err
		}
		var cs jwt.ClaimStrings
		for _, e := range arr {
			s, ok := e.(string)
			if !ok {
				return audClaim{invalid: true}, nil
			}
			cs = append(cs, s)
		}
		return audClaim{v: cs}, nil
	}
	return audClaim{}, nil
}

// unquote returns the string a JSON string literal (quotes included) stands for. Plain ASCII,
// the common case, is sliced out; escapes and other bytes (invalid UTF-8 is replaced, as
// encoding/json does) go through encoding/json.
func unquote(lit []byte) (string, error) {
	if len(lit) < 2 || lit[0] != '"' || lit[len(lit)-1] != '"' {
		return "", errClaimsSyntax
	}
	body := lit[1 : len(lit)-1]
	for _, b := range body {
		if b == '\\' || b >= 0x80 || b < 0x20 {
			var s string
			err := json.Unmarshal(lit, &s)
			return s, err
		}
	}
	return string(body), nil
}

// unquoteBytes is unquote for a key, which is only compared: plain ASCII is returned in place.
func unquoteBytes(lit []byte) ([]byte, error) {
	if len(lit) < 2 || lit[0] != '"' || lit[len(lit)-1] != '"' {
		return nil, errClaimsSyntax
	}
	body := lit[1 : len(lit)-1]
	for _, b := range body {
		if b == '\\' || b >= 0x80 || b < 0x20 {
			s, err := unquote(lit)
			return []byte(s), err
		}
	}
	return body, nil
}

// parseNumber converts a JSON number as encoding/json does into an any (strconv.ParseFloat), and
// fails where it fails (beyond float64's range). Integers of up to 15 digits, which every
// timestamp is, are converted without allocating.
func parseNumber(b []byte) (float64, error) {
	neg := b[0] == '-'
	digits := b
	if neg {
		digits = b[1:]
	}
	if n := len(digits); n > 0 && n <= 15 {
		var v int64
		plain := true
		for _, d := range digits {
			if d < '0' || d > '9' {
				plain = false
				break
			}
			v = v*10 + int64(d-'0')
		}
		if plain {
			if neg {
				return -float64(v), nil
			}
			return float64(v), nil
		}
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return 0, fmt.Errorf("claims: number %s: %w", b, err)
	}
	return f, nil
}

// maxClaimsDepth bounds the nesting skipValue follows. encoding/json has validated the payload
// (and limits nesting itself) before UnmarshalJSON runs; this keeps a direct caller from
// recursing without end.
const maxClaimsDepth = 10000

// skipValue returns the end of the JSON value starting at data[i], checking the range of every
// number in it.
func skipValue(data []byte, i, depth int) (int, error) {
	if i >= len(data) || depth > maxClaimsDepth {
		return 0, errClaimsSyntax
	}
	switch c := data[i]; {
	case c == '"':
		return scanString(data, i)
	case c == '{' || c == '[':
		closing := byte('}')
		if c == '[' {
			closing = ']'
		}
		i = skipSpace(data, i+1)
		if i < len(data) && data[i] == closing {
			return i + 1, nil
		}
		for {
			if c == '{' {
				end, err := scanString(data, i)
				if err != nil {
					return 0, err
				}
				i = skipSpace(data, end)
				if i >= len(data) || data[i] != ':' {
					return 0, errClaimsSyntax
				}
				i = skipSpace(data, i+1)
			}
			end, err := skipValue(data, i, depth+1)
			if err != nil {
				return 0, err
			}
			i = skipSpace(data, end)
			if i >= len(data) {
				return 0, errClaimsSyntax
			}
			switch data[i] {
			case ',':
				i = skipSpace(data, i+1)
			case closing:
				return i + 1, nil
			default:
				return 0, errClaimsSyntax
			}
		}
	case isNumber(c):
		end := i
		for end < len(data) && isNumberByte(data[end]) {
			end++
		}
		if overflows(data[i:end]) {
			if _, err := parseNumber(data[i:end]); err != nil {
				return 0, err
			}
		}
		return end, nil
	}
	for _, lit := range [...]string{"true", "false", "null"} {
		if len(data)-i >= len(lit) && string(data[i:i+len(lit)]) == lit {
			return i + len(lit), nil
		}
	}
	return 0, errClaimsSyntax
}

// overflows reports whether a JSON number may lie beyond float64's range: only one with an
// exponent or with more than 308 digits before its point can.
func overflows(num []byte) bool {
	n := 0
	for _, d := range num {
		switch {
		case d == 'e' || d == 'E':
			return true
		case d == '.':
			return n > 308
		case d >= '0' && d <= '9':
			n++
		}
	}
	return n > 308
}

func isNumber(c byte) bool { return c == '-' || (c >= '0' && c <= '9') }

func isNumberByte(c byte) bool {
	return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
}

// scanString returns the end (after the closing quote) of the string literal at data[i].
func scanString(data []byte, i int) (int, error) {
	if i >= len(data) || data[i] != '"' {
		return 0, errClaimsSyntax
	}
	for j := i + 1; j < len(data); j++ {
		switch data[j] {
		case '\\':
			j++
		case '"':
			return j + 1, nil
		}
	}
	return 0, errClaimsSyntax
}

func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// trailing accepts only white space after the object.
func trailing(data []byte, i int) error {
	if skipSpace(data, i) != len(data) {
		return errClaimsSyntax
	}
	return nil
}
