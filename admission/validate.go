package admission

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"strings"
	"time"
)

// Limits on identifiers. Activity ids become part of store keys (inside a Redis Cluster hash tag),
// so they are restricted to a safe alphabet; user and request ids are opaque but bounded so that a
// hostile client cannot make the store hold arbitrarily large keys.
const (
	MaxActivityIDLen = 64
	MaxUserIDLen     = 256
	MaxRequestIDLen  = 128

	// MaxBuckets is the most stock buckets one activity may be split into (Activity.Buckets).
	MaxBuckets = 256
)

// ValidActivityID reports whether id may name an activity: 1 to 64 bytes of ASCII letters, digits,
// '-', '_' and '.'.
func ValidActivityID(id string) bool {
	if len(id) == 0 || len(id) > MaxActivityIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}

// validate checks a definition and normalises its times to the milliseconds stores keep. An empty
// salt is left empty: the store generates one on creation and keeps the old one on redefinition.
func (a Activity) Validate() (Activity, error) {
	switch {
	case !ValidActivityID(a.ID):
		return a, BadInput("activity id %q: want 1-%d of [A-Za-z0-9._-]", a.ID, MaxActivityIDLen)
	case a.Stock < 0:
		return a, BadInput("activity %s: stock %d is negative", a.ID, a.Stock)
	case a.Limit <= 0:
		return a, BadInput("activity %s: per-user limit %d must be positive", a.ID, a.Limit)
	case a.Start.IsZero() || a.End.IsZero():
		return a, BadInput("activity %s: start and end are required", a.ID)
	case a.PayWithin < 0:
		return a, BadInput("activity %s: pay window %s is negative", a.ID, a.PayWithin)
	case a.Buckets < 0 || a.Buckets > MaxBuckets:
		return a, BadInput("activity %s: buckets %d: want 0 to %d", a.ID, a.Buckets, MaxBuckets)
	case a.Buckets > 1 && int64(a.Buckets) > a.Stock:
		return a, BadInput("activity %s: %d buckets for a stock of %d: never more buckets than items", a.ID, a.Buckets, a.Stock)
	}
	if a.Buckets == 1 { // one bucket is no split
		a.Buckets = 0
	}
	// Stores keep milliseconds; normalise so that a stored definition compares equal to its source,
	// and before the order check, so that a window shorter than a millisecond cannot be stored empty.
	a.Start = time.UnixMilli(a.Start.UnixMilli())
	a.End = time.UnixMilli(a.End.UnixMilli())
	a.PayWithin = a.PayWithin.Truncate(time.Millisecond)
	if !a.End.After(a.Start) {
		return a, BadInput("activity %s: end %s is not after start %s (to the millisecond)", a.ID,
			a.End.UTC().Format(time.RFC3339Nano), a.Start.UTC().Format(time.RFC3339Nano))
	}
	return a, nil
}

// SameDefinition reports whether b redefines a without change; an empty salt in b means "keep".
func SameDefinition(a, b Activity) bool {
	return a.Stock == b.Stock && a.Buckets == b.Buckets && a.Limit == b.Limit && a.Start.Equal(b.Start) && a.End.Equal(b.End) &&
		a.PayWithin == b.PayWithin && (b.Salt == "" || a.Salt == b.Salt)
}

// NewSalt returns 16 random bytes, hex-encoded.
func NewSalt() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms.
	return hex.EncodeToString(b[:])
}

func (r Request) Validate() error {
	switch {
	case !ValidActivityID(r.Activity):
		return BadInput("activity id %q", r.Activity)
	}
	if err := CheckUserID(r.User); err != nil {
		return err
	}
	switch {
	case r.RequestID == "" || len(r.RequestID) > MaxRequestIDLen:
		return BadInput("request id must be 1-%d bytes", MaxRequestIDLen)
	case r.Qty <= 0:
		return BadInput("qty %d must be positive", r.Qty)
	}
	return nil
}

// CheckReplay checks the arguments of Admitter.Replay as Validate checks a request's.
func CheckReplay(activity, user, requestID string) error {
	return Request{Activity: activity, User: user, Qty: 1, RequestID: requestID}.Validate()
}

// HomeBucket is user's bucket among n: FNV-1a of the user id, mod n. Every admission and every
// result record of the user lives there, so the per-user limit and request-id replay stay inside
// one script.
func HomeBucket(user string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(user))
	return int(h.Sum32() % uint32(n))
}

// BadInput returns an error wrapping ErrBadInput that says what is wrong with the input: a
// request that can never succeed as given, refused before anything is written.
func BadInput(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadInput, fmt.Sprintf(format, args...))
}

// CheckUserID checks a user id (of an admission or a result call): a NUL byte would make it collide with the
// names of another user's per-reservation records.
func CheckUserID(user string) error {
	if user == "" || len(user) > MaxUserIDLen {
		return BadInput("user id must be 1-%d bytes", MaxUserIDLen)
	}
	if strings.IndexByte(user, 0) >= 0 {
		return BadInput("user id must not contain a NUL byte")
	}
	return nil
}
