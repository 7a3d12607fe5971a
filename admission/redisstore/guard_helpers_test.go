package redisstore

// Helpers of the Guard tests over a Redis store, as package admission's Guard tests have them.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"

	"github.com/sony/gobreaker/v2"
)

func startGuard(t *testing.T, s admission.Store, opts admission.GuardOptions) *admission.Guard {
	t.Helper()
	g := admission.NewGuard(s, opts)
	g.Start(context.Background())
	t.Cleanup(func() { _ = g.Close() })
	return g
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitHolders waits until g has loaded the holders of act's current sell-out.
func waitHolders(t *testing.T, g *admission.Guard, act string) {
	t.Helper()
	eventually(t, 5*time.Second, "holders of "+act+" loaded", func() bool { return g.HoldersLoaded(act) })
}

// openAt returns an activity whose window opened a minute before now.
func openAt(now time.Time, id string, stock, limit int64) admission.Activity {
	return admission.Activity{ID: id, Stock: stock, Limit: limit, Start: now.Add(-time.Minute), End: now.Add(time.Hour), PayWithin: time.Minute}
}

func mustDefine(t testing.TB, s admission.Store, a admission.Activity) admission.Activity {
	t.Helper()
	got, err := s.Define(context.Background(), a, false)
	if err != nil {
		t.Fatalf("define %s: %v", a.ID, err)
	}
	return got
}

func mustAdmit(t testing.TB, s admission.Store, act, user string, qty int64, req string) admission.Decision {
	t.Helper()
	d, err := s.Admit(context.Background(), admission.Request{Activity: act, User: user, Qty: qty, RequestID: req})
	if err != nil {
		t.Fatalf("admit %s/%s/%s: %v", act, user, req, err)
	}
	return d
}

func mustRemaining(t testing.TB, s admission.Store, act string) int64 {
	t.Helper()
	n, err := s.Remaining(context.Background(), act)
	if err != nil {
		t.Fatalf("remaining %s: %v", act, err)
	}
	return n
}

type stateLog struct {
	mu sync.Mutex
	tr []string
}

func (l *stateLog) hook(name string, from, to gobreaker.State) {
	l.mu.Lock()
	l.tr = append(l.tr, name+":"+from.String()+">"+to.String())
	l.mu.Unlock()
}

func (l *stateLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := ""
	for _, t := range l.tr {
		s += t + " "
	}
	return s
}
