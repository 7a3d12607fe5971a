package admissiontest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// The helpers below are the suite's own, exported for the stores' and the Guard's tests.

// OpenAt returns an activity whose window opened a minute before now and closes in an hour, with
// a minute to pay.
func OpenAt(now time.Time, id string, stock, limit int64) admission.Activity {
	return admission.Activity{ID: id, Stock: stock, Limit: limit, Start: now.Add(-time.Minute), End: now.Add(time.Hour), PayWithin: time.Minute}
}

// MustDefine defines a (force off), failing the test on an error.
func MustDefine(t testing.TB, s admission.Catalog, a admission.Activity) admission.Activity {
	t.Helper()
	got, err := s.Define(context.Background(), a, false)
	if err != nil {
		t.Fatalf("define %s: %v", a.ID, err)
	}
	return got
}

// MustAdmit asks for qty items of act for user with request id req, failing the test on an error.
func MustAdmit(t testing.TB, s admission.Admitter, act, user string, qty int64, req string) admission.Decision {
	t.Helper()
	d, err := s.Admit(context.Background(), admission.Request{Activity: act, User: user, Qty: qty, RequestID: req})
	if err != nil {
		t.Fatalf("admit %s/%s/%s: %v", act, user, req, err)
	}
	return d
}

// MustRemaining returns act's stock left, failing the test on an error.
func MustRemaining(t testing.TB, s admission.Catalog, act string) int64 {
	t.Helper()
	n, err := s.Remaining(context.Background(), act)
	if err != nil {
		t.Fatalf("remaining %s: %v", act, err)
	}
	return n
}

// StartGuard returns a started Guard over s, closed when the test ends.
func StartGuard(t testing.TB, s admission.Store, opts admission.GuardOptions) *admission.Guard {
	t.Helper()
	g := admission.NewGuard(s, opts)
	g.Start(context.Background())
	t.Cleanup(func() { _ = g.Close() })
	return g
}

// Eventually polls cond until it holds, failing the test after within.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// WaitHeld waits until g has loaded the held request ids of act's current sell-out.
func WaitHeld(t testing.TB, g *admission.Guard, act string) {
	t.Helper()
	Eventually(t, 5*time.Second, "held requests of "+act+" loaded", func() bool { return g.HeldLoaded(act) })
}

// BreakerLog records a Guard's breaker transitions (GuardOptions.OnStateChange: Hook) as
// "name:from>to" words.
type BreakerLog struct {
	mu sync.Mutex
	tr []string
}

// Hook is the GuardOptions.OnStateChange that records a transition.
func (l *BreakerLog) Hook(name string, from, to gobreaker.State) {
	l.mu.Lock()
	l.tr = append(l.tr, name+":"+from.String()+">"+to.String())
	l.mu.Unlock()
}

// String lists the transitions in order, each followed by a space.
func (l *BreakerLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := ""
	for _, t := range l.tr {
		s += t + " "
	}
	return s
}
