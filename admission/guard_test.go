package admission_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/admissiontest"
	"github.com/caddy-seckill/caddy-seckill/admission/localstore"
)

var errInjected = errors.New("injected store failure: connection refused")

// wrappedStore is the real localstore.Memory with a call counter, a failure switch and a way to lose
// restock broadcasts. It is not a mock: every call that is not failed runs the real store.
type wrappedStore struct {
	*localstore.Memory
	calls        atomic.Int64
	fail         atomic.Bool
	dropRestocks bool
	afterAdmit   func(admission.Decision) // runs after the real Admit, before the answer returns

	// HeldRequests calls are counted apart: the Guard makes them in the background, and calls
	// counts the store calls that requests cause. heldHook, if set, runs first; an error it returns is
	// the call's answer.
	heldCalls atomic.Int64
	heldHook  func() error
}

func wrap(m *localstore.Memory) *wrappedStore { return &wrappedStore{Memory: m} }

func (s *wrappedStore) enter() error {
	s.calls.Add(1)
	if s.fail.Load() {
		return errInjected
	}
	return nil
}

func (s *wrappedStore) Define(ctx context.Context, a admission.Activity, force bool) (admission.Activity, error) {
	if err := s.enter(); err != nil {
		return admission.Activity{}, err
	}
	return s.Memory.Define(ctx, a, force)
}

func (s *wrappedStore) Activity(ctx context.Context, id string) (admission.Snapshot, error) {
	if err := s.enter(); err != nil {
		return admission.Snapshot{}, err
	}
	return s.Memory.Activity(ctx, id)
}

func (s *wrappedStore) Activities(ctx context.Context) ([]string, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	return s.Memory.Activities(ctx)
}

func (s *wrappedStore) Delete(ctx context.Context, id string, force bool) error {
	if err := s.enter(); err != nil {
		return err
	}
	return s.Memory.Delete(ctx, id, force)
}

func (s *wrappedStore) Admit(ctx context.Context, r admission.Request) (admission.Decision, error) {
	if err := s.enter(); err != nil {
		return admission.Decision{}, err
	}
	d, err := s.Memory.Admit(ctx, r)
	if s.afterAdmit != nil {
		s.afterAdmit(d)
	}
	return d, err
}

func (s *wrappedStore) Replay(ctx context.Context, activity, user, requestID string) (admission.Decision, error) {
	if err := s.enter(); err != nil {
		return admission.Decision{}, err
	}
	return s.Memory.Replay(ctx, activity, user, requestID)
}

func (s *wrappedStore) Release(ctx context.Context, activity, id string) (bool, error) {
	if err := s.enter(); err != nil {
		return false, err
	}
	return s.Memory.Release(ctx, activity, id)
}

func (s *wrappedStore) Remaining(ctx context.Context, activity string) (int64, error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	return s.Memory.Remaining(ctx, activity)
}

func (s *wrappedStore) HeldRequests(ctx context.Context, activity string) ([]string, error) {
	s.heldCalls.Add(1)
	if s.fail.Load() {
		return nil, errInjected
	}
	if s.heldHook != nil {
		if err := s.heldHook(); err != nil {
			return nil, err
		}
	}
	return s.Memory.HeldRequests(ctx, activity)
}

func (s *wrappedStore) SetResult(ctx context.Context, activity, user string, r admission.Result) error {
	if err := s.enter(); err != nil {
		return err
	}
	return s.Memory.SetResult(ctx, activity, user, r)
}

func (s *wrappedStore) GetResult(ctx context.Context, activity, user string) (admission.Result, error) {
	if err := s.enter(); err != nil {
		return admission.Result{}, err
	}
	return s.Memory.GetResult(ctx, activity, user)
}

func (s *wrappedStore) AppendResult(ctx context.Context, dst []byte, activity, user string) ([]byte, string, error) {
	if err := s.enter(); err != nil {
		return dst, "", err
	}
	return s.Memory.AppendResult(ctx, dst, activity, user)
}

// Restocks subscribes for real; with dropRestocks every broadcast is read and thrown away, as if
// the pub/sub connection had lost them.
func (s *wrappedStore) Restocks(ctx context.Context) (<-chan string, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	ch, err := s.Memory.Restocks(ctx)
	if err != nil || !s.dropRestocks {
		return ch, err
	}
	out := make(chan string)
	go func() {
		defer close(out)
		for range ch {
		}
	}()
	return out, nil
}

func (s *wrappedStore) EnsureGroup(ctx context.Context, activity, group string) error {
	if err := s.enter(); err != nil {
		return err
	}
	return s.Memory.EnsureGroup(ctx, activity, group)
}

func (s *wrappedStore) ReadGroup(ctx context.Context, activity, group, consumer string, count int, block time.Duration, pending bool) ([]admission.Win, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	return s.Memory.ReadGroup(ctx, activity, group, consumer, count, block, pending)
}

func (s *wrappedStore) Ack(ctx context.Context, activity, group string, ids ...string) error {
	if err := s.enter(); err != nil {
		return err
	}
	return s.Memory.Ack(ctx, activity, group, ids...)
}

func (s *wrappedStore) Claim(ctx context.Context, activity, group, consumer string, minIdle time.Duration, count int) ([]admission.Win, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	return s.Memory.Claim(ctx, activity, group, consumer, minIdle, count)
}

func (s *wrappedStore) DeadLetter(ctx context.Context, activity, group string, w admission.Win, reason string) error {
	if err := s.enter(); err != nil {
		return err
	}
	return s.Memory.DeadLetter(ctx, activity, group, w, reason)
}

func (s *wrappedStore) DeadLetters(ctx context.Context, activity string, count int) ([]admission.Win, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	return s.Memory.DeadLetters(ctx, activity, count)
}

// sellOut defines act with stock items and sells them through s (the raw store, as another node
// would); it returns the reservations.
func sellOut(t *testing.T, s admission.Store, act string, stock int64) []string {
	t.Helper()
	mustDefine(t, s, openAt(time.Now(), act, stock, 1))
	var resv []string
	for i := range stock {
		d := mustAdmit(t, s, act, "seller-"+strconv.FormatInt(i, 10), 1, "r")
		if d.Outcome != admission.Won {
			t.Fatalf("sell-out admission = %+v", d)
		}
		resv = append(resv, d.ReservationID)
	}
	return resv
}

func TestGuardSoldOutSkipsStore(t *testing.T) {
	store := wrap(newMemory(t))
	resv := sellOut(t, store, "a", 3)
	g := admission.NewGuard(store, admission.GuardOptions{})
	if g.SoldOut("a") {
		t.Fatal("flag set before any sold-out answer")
	}
	if d := mustAdmit(t, g, "a", "late", 1, "r"); d.Outcome != admission.SoldOut || d.Remaining != 0 {
		t.Fatalf("first rejection = %+v", d)
	}
	if !g.SoldOut("a") {
		t.Fatal("flag not set by a sold-out answer with nothing left")
	}
	before := store.calls.Load()
	for i := range 100 {
		if d := mustAdmit(t, g, "a", "u"+strconv.Itoa(i), 1, "r"); d.Outcome != admission.SoldOut {
			t.Fatalf("flagged admission = %+v", d)
		}
	}
	if n := store.calls.Load() - before; n != 0 {
		t.Errorf("100 sold-out rejections made %d store calls, want 0", n)
	}
	// Other activities are not affected.
	mustDefine(t, store, openAt(time.Now(), "b", 1, 1))
	if d := mustAdmit(t, g, "b", "u", 1, "r"); d.Outcome != admission.Won {
		t.Errorf("other activity = %+v", d)
	}
	// A release through this Guard clears its own flag at once, without Start.
	if ok, err := g.Release(context.Background(), "a", resv[0]); !ok || err != nil {
		t.Fatalf("release = %v, %v", ok, err)
	}
	if g.SoldOut("a") {
		t.Error("flag still set after a release through the guard")
	}
	if d := mustAdmit(t, g, "a", "late", 1, "r2"); d.Outcome != admission.Won {
		t.Errorf("admission after release = %+v", d)
	}
}

func TestGuardReplayAfterSellOut(t *testing.T) {
	store := wrap(newMemory(t))
	mustDefine(t, store, openAt(time.Now(), "a", 1, 1))
	g := admission.NewGuard(store, admission.GuardOptions{})
	ctx := context.Background()
	won, err := g.Admit(ctx, admission.Request{Activity: "a", User: "winner", Qty: 1, RequestID: "key-1", MayReplay: true})
	if err != nil || won.Outcome != admission.Won {
		t.Fatalf("first buy = %+v, %v", won, err)
	}
	if !g.SoldOut("a") {
		t.Fatal("the last item's win did not set the flag")
	}
	waitHeld(t, g, "a")
	// key-1 is a held win's: the winner's retry reaches the store and gets its first answer back.
	before := store.calls.Load()
	again, err := g.Admit(ctx, admission.Request{Activity: "a", User: "winner", Qty: 1, RequestID: "key-1", MayReplay: true})
	if err != nil || again.Outcome != admission.Won || !again.Replayed || again.ReservationID != won.ReservationID {
		t.Fatalf("retry after sell-out = %+v, %v; want the first win replayed", again, err)
	}
	if n := store.calls.Load() - before; n != 1 {
		t.Errorf("a MayReplay request made %d store calls, want 1", n)
	}
	// key-2 is no held win's: the flag answers.
	before = store.calls.Load()
	if d, _ := g.Admit(ctx, admission.Request{Activity: "a", User: "other", Qty: 1, RequestID: "key-2", MayReplay: true}); d.Outcome != admission.SoldOut {
		t.Errorf("a keyed request with no held win's id = %+v, want sold_out", d)
	}
	if n := store.calls.Load() - before; n != 0 {
		t.Errorf("a keyed request with no held win's id made %d store calls, want 0", n)
	}
	// Without MayReplay the flag answers alone.
	before = store.calls.Load()
	if d, _ := g.Admit(ctx, admission.Request{Activity: "a", User: "winner", Qty: 1, RequestID: "key-1"}); d.Outcome != admission.SoldOut {
		t.Errorf("unkeyed request = %+v, want sold_out from the flag", d)
	}
	if n := store.calls.Load() - before; n != 0 {
		t.Errorf("a flagged unkeyed request made %d store calls, want 0", n)
	}
}

// keyed is a request with a client-chosen idempotency key.
func keyed(act, user, key string) admission.Request {
	return admission.Request{Activity: act, User: user, Qty: 1, RequestID: key, MayReplay: true}
}

// The set is of request ids, not users: after a sell-out with the set loaded, a keyed request
// with a held win's id reaches the store (whoever sends it), and any other id is answered by the
// flag without a store call, also from a winner (a new key, or the key of a win released before
// the sell-out).
func TestGuardHeldRequestIDs(t *testing.T) {
	store := wrap(newMemory(t))
	mustDefine(t, store, openAt(time.Now(), "a", 3, 2))
	g := admission.NewGuard(store, admission.GuardOptions{})
	ctx := context.Background()
	wins := map[string]admission.Decision{}
	buy := func(user, key string) {
		t.Helper()
		d, err := g.Admit(ctx, keyed("a", user, key))
		if err != nil || d.Outcome != admission.Won || d.Replayed {
			t.Fatalf("%s/%s = %+v, %v; want a win", user, key, d, err)
		}
		wins[user+"/"+key] = d
	}
	buy("w1", "k1")
	buy("w1", "k2") // a second win of the same user
	buy("w2", "k3")
	// w2 gives its item back (the flag is cleared) and w3 buys it: sold out again, with k3 the
	// key of a released win.
	if ok, err := g.Release(ctx, "a", wins["w2/k3"].ReservationID); !ok || err != nil {
		t.Fatalf("release w2/k3 = %v, %v", ok, err)
	}
	buy("w3", "k4")
	if !g.SoldOut("a") {
		t.Fatal("the last item's win did not set the flag")
	}
	waitHeld(t, g, "a")

	decide := func(user, key string) (admission.Decision, bool, int64) {
		t.Helper()
		before := store.calls.Load()
		d, flagged, err := g.Decide(ctx, keyed("a", user, key))
		if err != nil {
			t.Fatalf("%s/%s: %v", user, key, err)
		}
		return d, flagged, store.calls.Load() - before
	}
	for _, k := range []string{"w1/k1", "w1/k2", "w3/k4"} {
		user, key, _ := strings.Cut(k, "/")
		d, flagged, calls := decide(user, key)
		if d.Outcome != admission.Won || !d.Replayed || d.ReservationID != wins[k].ReservationID || flagged || calls != 1 {
			t.Errorf("retry of held win %s = %+v, flagged %v, %d store calls; want its win replayed by 1 store call", k, d, flagged, calls)
		}
		if g.RefusesReplay("a", key) {
			t.Errorf("RefusesReplay(%q) = true for a held win's key", key)
		}
	}
	for _, c := range []struct{ user, key, why string }{
		{"w1", "k9", "a winner's new key (the store would say limit_reached)"},
		{"w2", "k3", "a released win's key (the store would replay it)"},
		{"x", "k5", "another user's new key"},
	} {
		d, flagged, calls := decide(c.user, c.key)
		if d.Outcome != admission.SoldOut || !flagged || calls != 0 {
			t.Errorf("%s: %+v, flagged %v, %d store calls; want sold_out from the flag, no store call", c.why, d, flagged, calls)
		}
		if !g.RefusesReplay("a", c.key) {
			t.Errorf("RefusesReplay(%q) = false for %s", c.key, c.why)
		}
	}
	// A held win's key from another user reaches the store, which decides for that user.
	if d, flagged, calls := decide("x", "k1"); d.Outcome != admission.SoldOut || d.Replayed || flagged || calls != 1 {
		t.Errorf("another user with held key k1 = %+v, flagged %v, %d store calls; want the store's sold_out", d, flagged, calls)
	}
}

// RefusesReplay answers true only for a flagged activity whose held set has loaded and lacks the
// key, and allocates nothing.
func TestGuardRefusesReplay(t *testing.T) {
	store := wrap(newMemory(t))
	resv := sellOut(t, store, "a", 2)
	gate := make(chan struct{})
	store.heldHook = func() error { <-gate; return nil }
	g := admission.NewGuard(store, admission.GuardOptions{})
	if g.RefusesReplay("a", "k") || g.RefusesReplay("nope", "k") {
		t.Error("RefusesReplay before any flag = true")
	}
	if d := mustAdmit(t, g, "a", "late", 1, "r"); d.Outcome != admission.SoldOut || !g.SoldOut("a") {
		t.Fatalf("first rejection = %+v", d)
	}
	if g.RefusesReplay("a", "k") {
		t.Error("RefusesReplay while the held set loads = true")
	}
	close(gate)
	waitHeld(t, g, "a")
	if !g.RefusesReplay("a", "k") || g.RefusesReplay("a", "r") {
		t.Errorf("RefusesReplay after the load: k %v, r %v; want true, false", g.RefusesReplay("a", "k"), g.RefusesReplay("a", "r"))
	}
	for _, key := range []string{"k", "r"} {
		if n := testing.AllocsPerRun(1000, func() { g.RefusesReplay("a", key) }); n != 0 {
			t.Errorf("RefusesReplay(%q) allocates %.1f times, want 0", key, n)
		}
	}
	if ok, err := g.Release(context.Background(), "a", resv[0]); !ok || err != nil {
		t.Fatalf("release = %v, %v", ok, err)
	}
	if g.RefusesReplay("a", "k") {
		t.Error("RefusesReplay after a restock = true")
	}
}

func TestGuardKeyedUnheldIDsSkipStore(t *testing.T) {
	store := wrap(newMemory(t))
	sellOut(t, store, "a", 3)
	g := admission.NewGuard(store, admission.GuardOptions{})
	ctx := context.Background()
	if d := mustAdmit(t, g, "a", "late", 1, "r"); d.Outcome != admission.SoldOut || !g.SoldOut("a") {
		t.Fatalf("first rejection = %+v, flag %v", d, g.SoldOut("a"))
	}
	waitHeld(t, g, "a")
	if n := store.heldCalls.Load(); n != 1 {
		t.Errorf("one sell-out loaded the held set %d times, want 1", n)
	}
	before := store.calls.Load()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				d, err := g.Admit(ctx, keyed("a", "u"+strconv.Itoa(w*25+i), "key-"+strconv.Itoa(i)))
				if err != nil || d.Outcome != admission.SoldOut {
					t.Errorf("keyed request with no held win's id = %+v, %v; want sold_out", d, err)
				}
			}
		}()
	}
	wg.Wait()
	if n := store.calls.Load() - before; n != 0 {
		t.Errorf("100 keyed requests with no held win's id made %d store calls, want 0", n)
	}
	// A winner's retry still reaches the store and gets its win replayed.
	before = store.calls.Load()
	d, err := g.Admit(ctx, keyed("a", "seller-1", "r"))
	if err != nil || d.Outcome != admission.Won || !d.Replayed {
		t.Errorf("winner's retry = %+v, %v; want the first win replayed", d, err)
	}
	if n := store.calls.Load() - before; n != 1 {
		t.Errorf("a winner's retry made %d store calls, want 1", n)
	}
}

// TestGuardReplay: Replay answers a key no held win has from the held set, without a store call,
// once a sold-out activity's set is loaded; a winner's key reaches the store, and a failing store
// is ErrBusy, as for Admit.
func TestGuardReplay(t *testing.T) {
	store := wrap(newMemory(t))
	sellOut(t, store, "a", 3)
	g := admission.NewGuard(store, admission.GuardOptions{})
	ctx := context.Background()
	if d := mustAdmit(t, g, "a", "late", 1, "r"); d.Outcome != admission.SoldOut || !g.SoldOut("a") {
		t.Fatalf("first rejection = %+v, flag %v", d, g.SoldOut("a"))
	}
	waitHeld(t, g, "a")
	before := store.calls.Load()
	if d, err := g.Replay(ctx, "a", "seller-1", "no-such-key"); !errors.Is(err, admission.ErrNotFound) {
		t.Errorf("replay of a key no held win has = %+v, %v; want ErrNotFound", d, err)
	}
	if n := store.calls.Load() - before; n != 0 {
		t.Errorf("a replay of a key no held win has made %d store calls, want 0", n)
	}
	d, err := g.Replay(ctx, "a", "seller-1", "r")
	if err != nil || d.Outcome != admission.Won || !d.Replayed || d.ReservationID == "" {
		t.Errorf("winner's replay = %+v, %v; want the first win replayed", d, err)
	}
	if d, err := g.Replay(ctx, "a", "late", "r"); !errors.Is(err, admission.ErrNotFound) {
		t.Errorf("another user's replay of a held key = %+v, %v; want the store's ErrNotFound", d, err)
	}
	if n := store.calls.Load() - before; n != 2 {
		t.Errorf("two replays of a held key made %d store calls, want 2", n)
	}
	store.fail.Store(true)
	if d, err := g.Replay(ctx, "a", "seller-1", "r"); !errors.Is(err, admission.ErrBusy) {
		t.Errorf("replay on a failing store = %+v, %v; want ErrBusy", d, err)
	}
}

// Decide tells the flag's answers from the store's: the edge counts them at different layers.
func TestGuardDecideTellsFlagFromStore(t *testing.T) {
	store := wrap(newMemory(t))
	sellOut(t, store, "a", 3)
	g := admission.NewGuard(store, admission.GuardOptions{})
	ctx := context.Background()
	d, flagged, err := g.Decide(ctx, admission.Request{Activity: "a", User: "late", Qty: 1, RequestID: "r"})
	if err != nil || d.Outcome != admission.SoldOut || flagged {
		t.Fatalf("the store's sell-out answer = %+v, flagged %v, %v; want sold_out, not flagged", d, flagged, err)
	}
	d, flagged, err = g.Decide(ctx, admission.Request{Activity: "a", User: "later", Qty: 1, RequestID: "r"})
	if err != nil || d.Outcome != admission.SoldOut || !flagged {
		t.Fatalf("the flag's answer = %+v, flagged %v, %v; want sold_out, flagged", d, flagged, err)
	}
	waitHeld(t, g, "a")
	if d, flagged, err = g.Decide(ctx, keyed("a", "someone", "k")); err != nil || d.Outcome != admission.SoldOut || !flagged {
		t.Errorf("a keyed request with no held win's id = %+v, flagged %v, %v; want sold_out, flagged", d, flagged, err)
	}
	if d, flagged, err = g.Decide(ctx, keyed("a", "seller-1", "r")); err != nil || d.Outcome != admission.Won || flagged {
		t.Errorf("a winner's retry = %+v, flagged %v, %v; want the store's replayed win", d, flagged, err)
	}
}

// Until the held set is known, a keyed request may be a winner's retry: it goes to the store.
func TestGuardKeyedBeforeHeldLoad(t *testing.T) {
	store := wrap(newMemory(t))
	sellOut(t, store, "a", 1)
	gate := make(chan struct{})
	store.heldHook = func() error { <-gate; return nil }
	g := admission.NewGuard(store, admission.GuardOptions{})
	ctx := context.Background()
	if d := mustAdmit(t, g, "a", "late", 1, "r"); d.Outcome != admission.SoldOut || !g.SoldOut("a") {
		t.Fatalf("first rejection = %+v", d)
	}
	before := store.calls.Load()
	if d, err := g.Admit(ctx, keyed("a", "seller-0", "r")); err != nil || d.Outcome != admission.Won || !d.Replayed {
		t.Errorf("winner's retry before the load = %+v, %v; want the first win replayed", d, err)
	}
	if d, err := g.Admit(ctx, keyed("a", "other", "k")); err != nil || d.Outcome != admission.SoldOut {
		t.Errorf("keyed request with no held win's id before the load = %+v, %v", d, err)
	}
	if n := store.calls.Load() - before; n != 2 {
		t.Errorf("2 keyed requests before the held set loaded made %d store calls, want 2", n)
	}
	close(gate)
	waitHeld(t, g, "a")
	before = store.calls.Load()
	if d, _ := g.Admit(ctx, keyed("a", "other", "k")); d.Outcome != admission.SoldOut {
		t.Errorf("keyed request with no held win's id = %+v", d)
	}
	if n := store.calls.Load() - before; n != 0 {
		t.Errorf("after the load a keyed request with no held win's id made %d store calls, want 0", n)
	}
}

// A failed load leaves keyed requests going to the store, and the probe loads the set again.
func TestGuardHeldLoadRetried(t *testing.T) {
	store := wrap(newMemory(t))
	sellOut(t, store, "a", 1)
	var failures atomic.Int64
	store.heldHook = func() error {
		if failures.Add(1) == 1 {
			return errInjected
		}
		return nil
	}
	g := startGuard(t, store, admission.GuardOptions{ProbeInterval: 20 * time.Millisecond})
	if d := mustAdmit(t, g, "a", "late", 1, "r"); d.Outcome != admission.SoldOut || !g.SoldOut("a") {
		t.Fatalf("first rejection = %+v", d)
	}
	waitHeld(t, g, "a")
	if n := store.heldCalls.Load(); n < 2 {
		t.Errorf("held set loaded after %d calls, want a failure and a retry", n)
	}
	if d, err := g.Admit(context.Background(), keyed("a", "seller-0", "r")); err != nil || d.Outcome != admission.Won || !d.Replayed {
		t.Errorf("winner's retry = %+v, %v", d, err)
	}
}

// A restock drops the held set: the next sell-out has new wins, loaded afresh.
func TestGuardRestockDropsHeld(t *testing.T) {
	store := wrap(newMemory(t))
	resv := sellOut(t, store, "a", 2)
	g := admission.NewGuard(store, admission.GuardOptions{})
	ctx := context.Background()
	mustAdmit(t, g, "a", "late", 1, "r")
	waitHeld(t, g, "a")
	if ok, err := g.Release(ctx, "a", resv[0]); !ok || err != nil {
		t.Fatalf("release = %v, %v", ok, err)
	}
	if g.SoldOut("a") || !admission.HeldDropped(g, "a") {
		t.Fatalf("after a restock: flag %v, held set dropped %v; want both dropped", g.SoldOut("a"), admission.HeldDropped(g, "a"))
	}
	// "late" buys the released item: a new held win, and a new sell-out.
	won, err := g.Admit(ctx, keyed("a", "late", "k"))
	if err != nil || won.Outcome != admission.Won || !g.SoldOut("a") {
		t.Fatalf("buy after the restock = %+v, %v, flag %v", won, err, g.SoldOut("a"))
	}
	waitHeld(t, g, "a")
	if n := store.heldCalls.Load(); n != 2 {
		t.Errorf("two sell-outs loaded the held set %d times, want 2", n)
	}
	d, err := g.Admit(ctx, keyed("a", "late", "k"))
	if err != nil || !d.Replayed || d.ReservationID != won.ReservationID {
		t.Errorf("new winner's retry = %+v, %v; want its win replayed", d, err)
	}
	// seller-0 gave its item back and holds nothing: its keyed request with a new key stays local.
	before := store.calls.Load()
	if d, _ := g.Admit(ctx, keyed("a", "seller-0", "other-key")); d.Outcome != admission.SoldOut {
		t.Errorf("former winner's keyed request = %+v", d)
	}
	if n := store.calls.Load() - before; n != 0 {
		t.Errorf("a former winner's keyed request made %d store calls, want 0", n)
	}
}

func TestGuardFlagOnlyWhenNothingLeft(t *testing.T) {
	store := newMemory(t)
	mustDefine(t, store, openAt(time.Now(), "a", 3, 2))
	g := admission.NewGuard(store, admission.GuardOptions{})
	mustAdmit(t, g, "a", "u1", 2, "r1")
	if d := mustAdmit(t, g, "a", "u1", 1, "r2"); d.Outcome != admission.LimitReached || g.SoldOut("a") {
		t.Fatalf("limit reached = %+v, flag %v; want no flag", d, g.SoldOut("a"))
	}
	if d := mustAdmit(t, g, "a", "u2", 2, "r1"); d.Outcome != admission.SoldOut || d.Remaining != 1 || g.SoldOut("a") {
		t.Fatalf("qty 2 of 1 = %+v, flag %v; want no flag", d, g.SoldOut("a"))
	}
	// The last item: the win that empties the stock flags the activity.
	if d := mustAdmit(t, g, "a", "u2", 1, "r2"); d.Outcome != admission.Won || d.Remaining != 0 || !g.SoldOut("a") {
		t.Fatalf("last item = %+v, flag %v; want the flag", d, g.SoldOut("a"))
	}
}

// A sell-out answer that crossed a restock must not leave the flag set.
func TestGuardSoldOutAnswerCrossingRestock(t *testing.T) {
	mem := newMemory(t)
	resv := sellOut(t, mem, "a", 1)
	store := wrap(mem)
	g := admission.NewGuard(store, admission.GuardOptions{ProbeInterval: time.Hour})
	var once sync.Once
	store.afterAdmit = func(d admission.Decision) {
		once.Do(func() {
			// The answer is sold out, but before it reaches the guard the item comes back.
			if d.Outcome != admission.SoldOut {
				t.Errorf("admission = %+v, want sold out", d)
			}
			if ok, err := g.Release(context.Background(), "a", resv[0]); !ok || err != nil {
				t.Errorf("release = %v, %v", ok, err)
			}
		})
	}
	if d := mustAdmit(t, g, "a", "u", 1, "r"); d.Outcome != admission.SoldOut {
		t.Fatalf("admission = %+v", d)
	}
	if g.SoldOut("a") {
		t.Error("a stale sold-out answer set the flag after a restock")
	}
	if d := mustAdmit(t, g, "a", "u", 1, "r2"); d.Outcome != admission.Won {
		t.Errorf("admission after restock = %+v", d)
	}
}

func TestGuardRestockBroadcastClearsFlag(t *testing.T) {
	store := newMemory(t)
	resv := sellOut(t, store, "a", 2)
	// Two nodes; the probe is out of the picture, so only the broadcast can clear the flags.
	g1 := startGuard(t, store, admission.GuardOptions{ProbeInterval: time.Hour})
	g2 := startGuard(t, store, admission.GuardOptions{ProbeInterval: time.Hour})
	for _, g := range []*admission.Guard{g1, g2} {
		if d := mustAdmit(t, g, "a", "late", 1, "r"); d.Outcome != admission.SoldOut || !g.SoldOut("a") {
			t.Fatalf("rejection = %+v, flag %v", d, g.SoldOut("a"))
		}
	}
	// A third party (the order backend's timeout) releases through the raw store.
	if ok, err := store.Release(context.Background(), "a", resv[1]); !ok || err != nil {
		t.Fatalf("release = %v, %v", ok, err)
	}
	eventually(t, time.Second, "restock broadcast clears both flags", func() bool { return !g1.SoldOut("a") && !g2.SoldOut("a") })
	if d := mustAdmit(t, g1, "a", "late", 1, "r2"); d.Outcome != admission.Won {
		t.Errorf("admission after restock = %+v", d)
	}
}

func TestGuardProbeClearsFlagWhenBroadcastLost(t *testing.T) {
	mem := newMemory(t)
	resv := sellOut(t, mem, "a", 1)
	store := wrap(mem)
	store.dropRestocks = true
	g := startGuard(t, store, admission.GuardOptions{ProbeInterval: 20 * time.Millisecond})
	if d := mustAdmit(t, g, "a", "late", 1, "r"); d.Outcome != admission.SoldOut || !g.SoldOut("a") {
		t.Fatalf("rejection = %+v", d)
	}
	// While sold out the probe keeps the flag.
	time.Sleep(60 * time.Millisecond)
	if !g.SoldOut("a") {
		t.Fatal("probe cleared the flag while nothing was left")
	}
	if ok, err := mem.Release(context.Background(), "a", resv[0]); !ok || err != nil {
		t.Fatalf("release = %v, %v", ok, err)
	}
	eventually(t, 5*time.Second, "probe clears the flag", func() bool { return !g.SoldOut("a") })
	if d := mustAdmit(t, g, "a", "late", 1, "r2"); d.Outcome != admission.Won {
		t.Errorf("admission after probe = %+v", d)
	}
}

func TestGuardProbeClearsDeletedActivity(t *testing.T) {
	mem := newMemory(t)
	sellOut(t, mem, "a", 1)
	g := startGuard(t, mem, admission.GuardOptions{ProbeInterval: 20 * time.Millisecond})
	mustAdmit(t, g, "a", "late", 1, "r")
	if !g.SoldOut("a") {
		t.Fatal("no flag")
	}
	if err := mem.Delete(context.Background(), "a", true); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "probe clears the flag of a deleted activity", func() bool { return !g.SoldOut("a") })
	if _, err := g.Admit(context.Background(), admission.Request{Activity: "a", User: "u", Qty: 1, RequestID: "r"}); !errors.Is(err, admission.ErrUnknownActivity) {
		t.Errorf("admission for a deleted activity: %v, want ErrUnknownActivity", err)
	}
}

func TestGuardBreakerFailsClosed(t *testing.T) {
	mem := newMemory(t)
	mustDefine(t, mem, openAt(time.Now(), "a", 1000, 1))
	store := wrap(mem)
	var log admissiontest.BreakerLog
	g := admission.NewGuard(store, admission.GuardOptions{ConsecutiveFailures: 3, OpenTimeout: 100 * time.Millisecond, OnStateChange: log.Hook})
	ctx := context.Background()
	req := func(i int) admission.Request {
		return admission.Request{Activity: "a", User: "u" + strconv.Itoa(i), Qty: 1, RequestID: "r"}
	}

	store.fail.Store(true)
	for i := range 3 {
		d, err := g.Admit(ctx, req(i))
		if !errors.Is(err, admission.ErrBusy) || !errors.Is(err, errInjected) || d.Outcome == admission.Won {
			t.Fatalf("admission on a failing store = %+v, %v; want ErrBusy wrapping the failure", d, err)
		}
	}
	if st := g.BreakerState(); st != gobreaker.StateOpen {
		t.Fatalf("breaker %v after 3 failures, want open", st)
	}
	before := store.calls.Load()
	for i := range 50 {
		d, err := g.Admit(ctx, req(100+i))
		if !errors.Is(err, admission.ErrBusy) || !errors.Is(err, gobreaker.ErrOpenState) || d.Outcome == admission.Won {
			t.Fatalf("admission with the breaker open = %+v, %v", d, err)
		}
	}
	if _, err := g.Remaining(ctx, "a"); !errors.Is(err, admission.ErrBusy) {
		t.Errorf("remaining with the breaker open: %v, want ErrBusy", err)
	}
	if n := store.calls.Load() - before; n != 0 {
		t.Errorf("an open breaker let %d calls through", n)
	}

	// The store recovers; after the open timeout a trial call goes through and admission resumes.
	store.fail.Store(false)
	var won admission.Decision
	eventually(t, 5*time.Second, "admission resumes", func() bool {
		d, err := g.Admit(ctx, req(1000))
		if err != nil && !errors.Is(err, admission.ErrBusy) {
			t.Fatalf("admission: %v", err)
		}
		won = d
		return err == nil
	})
	if won.Outcome != admission.Won {
		t.Errorf("admission after recovery = %+v", won)
	}
	if st := g.BreakerState(); st != gobreaker.StateClosed {
		t.Errorf("breaker %v after recovery, want closed", st)
	}
	if got, want := log.String(), "admission:closed>open admission:open>half-open admission:half-open>closed "; got != want {
		t.Errorf("state changes %q, want %q", got, want)
	}
	// Nothing was admitted while failing: only the one win after recovery.
	if snap, _ := mem.Activity(ctx, "a"); snap.Sold != 1 {
		t.Errorf("sold %d, want 1", snap.Sold)
	}
}

func TestGuardBreakerIgnoresAnswers(t *testing.T) {
	mem := newMemory(t)
	now := time.Now()
	mustDefine(t, mem, openAt(now, "a", 2, 1))
	mustDefine(t, mem, admission.Activity{ID: "later", Stock: 1, Limit: 1, Start: now.Add(time.Hour), End: now.Add(2 * time.Hour)})
	mustDefine(t, mem, admission.Activity{ID: "past", Stock: 1, Limit: 1, Start: now.Add(-2 * time.Hour), End: now.Add(-time.Hour)})
	store := wrap(mem)
	g := admission.NewGuard(store, admission.GuardOptions{ConsecutiveFailures: 2, OpenTimeout: time.Hour})
	ctx := context.Background()
	canceled, cancel := context.WithCancel(ctx)
	cancel()

	mustAdmit(t, g, "a", "u1", 1, "r")
	for range 5 {
		checks := []struct {
			name string
			err  error
			ok   func(error) bool
		}{}
		add := func(name string, err error, want error) {
			checks = append(checks, struct {
				name string
				err  error
				ok   func(error) bool
			}{name, err, func(e error) bool { return errors.Is(e, want) }})
		}
		d, err := g.Admit(ctx, admission.Request{Activity: "a", User: "u1", Qty: 1, RequestID: "r2"})
		if d.Outcome != admission.LimitReached {
			t.Errorf("limit = %+v, %v", d, err)
		}
		d, _ = g.Admit(ctx, admission.Request{Activity: "later", User: "u1", Qty: 1, RequestID: "r"})
		d2, _ := g.Admit(ctx, admission.Request{Activity: "past", User: "u1", Qty: 1, RequestID: "r"})
		if d.Outcome != admission.NotStarted || d2.Outcome != admission.Ended {
			t.Errorf("window answers = %v, %v", d.Outcome, d2.Outcome)
		}
		_, err = g.Admit(ctx, admission.Request{Activity: "a", User: "", Qty: 1, RequestID: "r"})
		add("bad input", err, admission.ErrBadInput)
		_, err = g.Admit(ctx, admission.Request{Activity: "nope", User: "u", Qty: 1, RequestID: "r"})
		add("unknown activity", err, admission.ErrUnknownActivity)
		_, err = g.Release(ctx, "a", "1-0")
		add("unknown reservation", err, admission.ErrNotFound)
		_, err = g.GetResult(ctx, "a", "nobody")
		add("no result", err, admission.ErrNotFound)
		for range 3 { // in a row: more than ConsecutiveFailures if they counted
			_, err = g.Admit(canceled, admission.Request{Activity: "a", User: "u9", Qty: 1, RequestID: "r"})
			add("canceled", err, context.Canceled)
		}
		if st := g.BreakerState(); st != gobreaker.StateClosed {
			t.Fatalf("breaker %v after canceled calls, want closed", st)
		}
		for _, c := range checks {
			if !c.ok(c.err) || errors.Is(c.err, admission.ErrBusy) {
				t.Errorf("%s: err = %v", c.name, c.err)
			}
		}
	}
	if st := g.BreakerState(); st != gobreaker.StateClosed {
		t.Fatalf("breaker %v after business answers, want closed", st)
	}
	// A sold-out answer with stock left (qty above what remains) is an answer too.
	mustDefine(t, mem, openAt(now, "b", 1, 2))
	for i := range 3 {
		if d := mustAdmit(t, g, "b", "u"+strconv.Itoa(i), 2, "r"); d.Outcome != admission.SoldOut || d.Remaining != 1 {
			t.Fatalf("qty 2 of 1 = %+v", d)
		}
	}
	if g.BreakerState() != gobreaker.StateClosed || g.SoldOut("b") {
		t.Fatalf("breaker %v, flag %v", g.BreakerState(), g.SoldOut("b"))
	}
	// Real failures still trip it.
	store.fail.Store(true)
	for range 2 {
		_, _ = g.Remaining(ctx, "a")
	}
	if st := g.BreakerState(); st != gobreaker.StateOpen {
		t.Errorf("breaker %v after 2 failures, want open", st)
	}
}

func TestGuardBreakerFailureRatio(t *testing.T) {
	mem := newMemory(t)
	mustDefine(t, mem, openAt(time.Now(), "a", 100, 100))
	store := wrap(mem)
	g := admission.NewGuard(store, admission.GuardOptions{FailureRatio: 0.5, RatioMinRequests: 10, OpenTimeout: time.Hour})
	ctx := context.Background()
	// Every other call fails: never 5 in a row, but half of them.
	for i := range 9 {
		store.fail.Store(i%2 == 0)
		_, _ = g.Remaining(ctx, "a")
	}
	if st := g.BreakerState(); st != gobreaker.StateClosed {
		t.Fatalf("breaker %v before the minimum number of calls", st)
	}
	store.fail.Store(true)
	_, _ = g.Remaining(ctx, "a")
	if st := g.BreakerState(); st != gobreaker.StateOpen {
		t.Errorf("breaker %v with 6 failures in 10 calls, want open", st)
	}
}

func TestGuardQueueBreakerIsSeparate(t *testing.T) {
	mem := newMemory(t)
	mustDefine(t, mem, openAt(time.Now(), "a", 100, 1))
	store := wrap(mem)
	g := admission.NewGuard(store, admission.GuardOptions{ConsecutiveFailures: 2, OpenTimeout: time.Hour})
	ctx := context.Background()
	store.fail.Store(true)
	for range 2 {
		if _, err := g.ReadGroup(ctx, "a", "g", "c", 10, 0, false); !errors.Is(err, admission.ErrBusy) {
			t.Fatalf("read on a failing store: %v, want ErrBusy", err)
		}
	}
	store.fail.Store(false)
	if st := g.QueueBreakerState(); st != gobreaker.StateOpen {
		t.Fatalf("queue breaker %v, want open", st)
	}
	if _, err := g.ReadGroup(ctx, "a", "g", "c", 10, 0, false); !errors.Is(err, gobreaker.ErrOpenState) {
		t.Errorf("read with the queue breaker open: %v", err)
	}
	if d := mustAdmit(t, g, "a", "u", 1, "r"); d.Outcome != admission.Won || g.BreakerState() != gobreaker.StateClosed {
		t.Errorf("admission with only the queue breaker open = %+v, breaker %v", d, g.BreakerState())
	}
}

func TestGuardCloseStopsBackground(t *testing.T) {
	mem := newMemory(t)
	resv := sellOut(t, mem, "a", 1)
	g := admission.NewGuard(mem, admission.GuardOptions{ProbeInterval: 10 * time.Millisecond})
	g.Start(context.Background())
	g.Start(context.Background()) // idempotent
	mustAdmit(t, g, "a", "late", 1, "r")
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if ok, _ := mem.Release(context.Background(), "a", resv[0]); !ok {
		t.Fatal("release failed")
	}
	time.Sleep(100 * time.Millisecond)
	if !g.SoldOut("a") {
		t.Error("a closed guard still clears flags in the background")
	}
	// The store is not closed by the guard.
	if n := mustRemaining(t, mem, "a"); n != 1 {
		t.Errorf("remaining = %d", n)
	}
}

func (s *wrappedStore) Backlog(ctx context.Context, activity, group string) (int64, error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	return s.Memory.Backlog(ctx, activity, group)
}

// partialStore marks every decision's Remaining as only a bucket's (RemainingPartial), as a
// split activity's redisstore.Store does for a win in a home bucket.
type partialStore struct{ *localstore.Memory }

func (s partialStore) Admit(ctx context.Context, r admission.Request) (admission.Decision, error) {
	d, err := s.Memory.Admit(ctx, r)
	d.RemainingPartial = true
	return d, err
}

// TestGuardNoFlagOnPartialRemaining: a win that leaves its bucket at 0 is not the activity's
// sell-out, so the Guard does not flag it (chaos scenario 11 undersold before it).
func TestGuardNoFlagOnPartialRemaining(t *testing.T) {
	store := newMemory(t)
	mustDefine(t, store, openAt(time.Now(), "a", 1, 1))
	g := admission.NewGuard(partialStore{store}, admission.GuardOptions{})
	if d := mustAdmit(t, g, "a", "u1", 1, "r1"); d.Outcome != admission.Won || d.Remaining != 0 || g.SoldOut("a") {
		t.Fatalf("win with a partial 0 = %+v, flag %v; want no flag", d, g.SoldOut("a"))
	}
}

func newMemory(t testing.TB) *localstore.Memory {
	s := localstore.NewMemory(localstore.MemoryOptions{})
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// The suite's helpers, under this package's names.
var (
	openAt        = admissiontest.OpenAt
	mustDefine    = admissiontest.MustDefine
	mustAdmit     = admissiontest.MustAdmit
	mustRemaining = admissiontest.MustRemaining
	startGuard    = admissiontest.StartGuard
	eventually    = admissiontest.Eventually
	waitHeld      = admissiontest.WaitHeld
)

// timedMemory is the real memory store that, as redisstore does, bounds a call by the Guard's
// AdmitTimeout itself (AdmitWithin); hold keeps an AdmitWithin waiting, as a stalled server would.
type timedMemory struct {
	*localstore.Memory
	hold     chan struct{}
	timeouts chan time.Duration
}

func (s timedMemory) AdmitWithin(ctx context.Context, r admission.Request, timeout time.Duration) (admission.Decision, error) {
	s.timeouts <- timeout
	select {
	case <-s.hold:
		return s.Admit(ctx, r)
	case <-time.After(timeout):
		return admission.Decision{}, fmt.Errorf("admit %s: %w", r.Activity, context.DeadlineExceeded)
	}
}

// TestGuardAdmitTimeoutByStore: a store that bounds its own wait gets the Guard's AdmitTimeout
// instead of a context with that deadline; its expiry is ErrBusy wrapping the deadline and counts
// towards the breaker, and an answered call decides as the store does.
func TestGuardAdmitTimeoutByStore(t *testing.T) {
	store := timedMemory{Memory: newMemory(t), hold: make(chan struct{}), timeouts: make(chan time.Duration, 4)}
	mustDefine(t, store, openAt(time.Now(), "a", 5, 1))
	g := admission.NewGuard(store, admission.GuardOptions{AdmitTimeout: 50 * time.Millisecond, ConsecutiveFailures: 1})
	_, err := g.Admit(context.Background(), admission.Request{Activity: "a", User: "u1", Qty: 1, RequestID: "r1"})
	if !errors.Is(err, admission.ErrBusy) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stalled admission: %v, want ErrBusy wrapping the deadline", err)
	}
	select {
	case got := <-store.timeouts:
		if got != 50*time.Millisecond {
			t.Errorf("the store was given %s, want the AdmitTimeout of 50ms", got)
		}
	default:
		t.Error("the Guard did not call the store's AdmitWithin")
	}
	if st := g.BreakerState(); st != gobreaker.StateOpen {
		t.Errorf("breaker %v after an expired admission with ConsecutiveFailures 1, want open", st)
	}
	if n, err := store.Remaining(context.Background(), "a"); err != nil || n != 5 {
		t.Errorf("remaining %d, %v after the expired call: want 5, nothing taken", n, err)
	}

	g2 := admission.NewGuard(store, admission.GuardOptions{AdmitTimeout: time.Minute})
	close(store.hold)
	if d := mustAdmit(t, g2, "a", "u2", 1, "r2"); d.Outcome != admission.Won || d.Remaining != 4 {
		t.Fatalf("answered admission = %+v, want a win leaving 4", d)
	}
}

// A release and a new win on another node, whose restock broadcast this node lost: the probe
// finds nothing left (the new win took the released item) and keeps the flag, but the set it
// keeps is the old sell-out's, which lacks the new win. The new winner's retry with its key must
// still get its win back here, at the latest once the probe has run.
func TestGuardProbeRefreshesHeldWhenBroadcastLost(t *testing.T) {
	mem := newMemory(t)
	mustDefine(t, mem, openAt(time.Now(), "a", 1, 1))
	store := wrap(mem)
	store.dropRestocks = true
	g := startGuard(t, store, admission.GuardOptions{ProbeInterval: 20 * time.Millisecond})
	ctx := context.Background()
	first, err := g.Admit(ctx, keyed("a", "w1", "k1"))
	if err != nil || first.Outcome != admission.Won || !g.SoldOut("a") {
		t.Fatalf("last item = %+v, %v, flag %v", first, err, g.SoldOut("a"))
	}
	waitHeld(t, g, "a")
	// Node B: the order backend gives w1's item back, and w2 wins it with key k2 (its answer
	// lost on the way back, say). This node hears of neither.
	if ok, err := mem.Release(ctx, "a", first.ReservationID); !ok || err != nil {
		t.Fatalf("release = %v, %v", ok, err)
	}
	won, err := mem.Admit(ctx, keyed("a", "w2", "k2"))
	if err != nil || won.Outcome != admission.Won || won.Remaining != 0 {
		t.Fatalf("w2's buy on node B = %+v, %v", won, err)
	}
	// The first retry finds the set stale (the window docs/api.md gives); the probe after it
	// reads the set again.
	if !g.RefusesReplay("a", "k2") {
		t.Fatal("the set read before w2's win already holds k2: the test proves nothing")
	}
	eventually(t, 5*time.Second, "k2 in the held set read again", func() bool { return !g.RefusesReplay("a", "k2") })
	d, flagged, err := g.Decide(ctx, keyed("a", "w2", "k2"))
	if err != nil || d.Outcome != admission.Won || !d.Replayed || d.ReservationID != won.ReservationID {
		t.Errorf("w2's retry with k2 on this node = %+v (flagged %v), %v; want its win replayed (RefusesReplay %v)",
			d, flagged, err, g.RefusesReplay("a", "k2"))
	}
}

// TestGuardProbeReadsHeldOnlyWhenAsked: the probe reads a sold-out activity's held set again only
// when a keyed request consulted it since the last probe, so an activity nobody presses any more
// costs each probe its stock reading, not a read of every held win.
func TestGuardProbeReadsHeldOnlyWhenAsked(t *testing.T) {
	store := wrap(newMemory(t))
	mustDefine(t, store, openAt(time.Now(), "a", 1, 1))
	g := startGuard(t, store, admission.GuardOptions{ProbeInterval: 10 * time.Millisecond})
	ctx := context.Background()
	if d, err := g.Admit(ctx, keyed("a", "w1", "k1")); err != nil || d.Outcome != admission.Won || !g.SoldOut("a") {
		t.Fatalf("last item = %+v, %v, flag %v", d, err, g.SoldOut("a"))
	}
	waitHeld(t, g, "a")
	loaded := store.heldCalls.Load()
	time.Sleep(150 * time.Millisecond) // fifteen probes, nobody asking
	if n := store.heldCalls.Load(); n != loaded {
		t.Errorf("held set read %d times by probes nobody's request asked for, want 0", n-loaded)
	}
	if !g.RefusesReplay("a", "k9") {
		t.Fatal("k9 is no held win's: want it refused")
	}
	eventually(t, 5*time.Second, "the probe after a keyed request reads the set again",
		func() bool { return store.heldCalls.Load() > loaded })
}
