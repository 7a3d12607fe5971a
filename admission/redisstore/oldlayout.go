package redisstore

import (
	"errors"
	"fmt"
	"strings"
)

// ErrOldLayout is the error (inside an *OldLayoutError) of a call on an activity that an earlier
// build created in its own key layout: its :meta has no layout 2 (docs/admission.md, "Redis
// keys"). This build serves only the layout of lua/admit.lua, so it refuses such an activity
// rather than misread it: a store meets one at its first call on the activity (bucketCount), and
// every script that reads or writes an activity's keys refuses it before it writes anything
// (LAYOUT).
var ErrOldLayout = errors.New("key layout of an earlier build")

// OldLayoutError names the activity of an earlier build's key layout and what to do about it. It
// wraps ErrOldLayout.
type OldLayoutError struct {
	Prefix   string // the store's key prefix (Options.KeyPrefix)
	Activity string // the activity (the parent of a split one)
}

func (e *OldLayoutError) Error() string {
	return fmt.Sprintf("activity %[2]s in Redis (prefix %[1]s) uses the key layout of an earlier build, which this build no "+
		"longer serves: finish or delete that sale with the earlier build (or delete its keys, %[1]s:{%[2]s}:* and, "+
		"if it is split into buckets, %[1]s:{%[2]s#*}:*, and remove %[2]s from the set %[1]s:activities) before starting this one",
		e.Prefix, e.Activity)
}

func (e *OldLayoutError) Unwrap() error { return ErrOldLayout }

// oldLayout is the error for activity (or one of its buckets) of an earlier build's key layout.
func (s *Store) oldLayout(activity string) error {
	return &OldLayoutError{Prefix: s.prefix, Activity: parentActivity(activity)}
}

// layoutRefusal starts the error word the scripts answer for an activity without layout 2; the
// key of its :meta follows.
const layoutRefusal = "LAYOUT no layout 2 in "

// oldLayoutErr turns a script's refusal "LAYOUT no layout 2 in <prefix>:{<activity>}:meta" into
// an *OldLayoutError naming the activity.
func oldLayoutErr(msg string) error {
	key, ok := strings.CutPrefix(msg, layoutRefusal)
	i, j := strings.Index(key, ":{"), strings.LastIndex(key, "}:")
	if !ok || i < 0 || j < i+2 {
		return fmt.Errorf("%w: %s", ErrOldLayout, msg)
	}
	return &OldLayoutError{Prefix: key[:i], Activity: parentActivity(key[i+2 : j])}
}

// parentActivity returns the activity of on, an activity or one of its buckets (bucketID: '#' is
// outside the activity id alphabet).
func parentActivity(on string) string {
	if i := strings.IndexByte(on, '#'); i >= 0 {
		return on[:i]
	}
	return on
}
