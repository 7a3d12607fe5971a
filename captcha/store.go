package captcha

import (
	"context"
	"errors"
	"time"
)

// Errors callers branch on.
var (
	// ErrNotFound is returned for a captcha id that was never issued, has expired or was used.
	ErrNotFound = errors.New("captcha not found")

	// ErrTooManyFetches is returned when a captcha's image was fetched more than MaxFetches times.
	ErrTooManyFetches = errors.New("captcha image fetched too often")
)

// Store keeps issued captchas until they are used or expire. Implementations are safe for
// concurrent use; MemoryStore serves one node, RedisStore lets any node verify a captcha another
// node issued.
type Store interface {
	// Put stores c under id for ttl, replacing any earlier captcha with that id.
	Put(ctx context.Context, id string, c Challenge, ttl time.Duration) error

	// Take returns the captcha and deletes it in one atomic step, so that only one caller ever
	// gets it, but only when it was issued to owner (the same user and activity); ErrNotFound when
	// there is none or it belongs to another owner, in which case nothing is deleted. The owner
	// check and the delete are one step: another user cannot use up someone else's captcha. The
	// returned Challenge need not carry the PNG.
	Take(ctx context.Context, id string, owner Owner) (Challenge, error)

	// Peek returns the captcha, with its PNG, without consuming it; ErrNotFound when there is none.
	Peek(ctx context.Context, id string) (Challenge, error)

	// CountFetch increments the captcha's image fetch counter and returns the new count;
	// ErrNotFound when there is no such captcha (no counter is created for it).
	CountFetch(ctx context.Context, id string) (int64, error)
}

// Owner is whom a captcha is bound to: one user, on one activity.
type Owner struct {
	User     string
	Activity string
}

// Challenge is one issued captcha.
type Challenge struct {
	User     string // the user it was issued to; only they may use it
	Activity string // the activity it was issued for; it is good for that activity only
	Digits   []byte // the solution, one digit (0-9, not ASCII) per byte
	PNG      []byte // the image, rendered once at issue time
}

// owner returns whom c is bound to.
func (c Challenge) owner() Owner { return Owner{User: c.User, Activity: c.Activity} }

// maxIDLen bounds ids taken from URLs before they reach a store key.
const maxIDLen = 64

// validID reports whether id can name a captcha: 1 to 64 ASCII letters and digits. Ids are
// embedded in Redis keys (inside a hash tag), so nothing else is let through.
func validID(id string) bool {
	if len(id) == 0 || len(id) > maxIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}
