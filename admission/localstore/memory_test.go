package localstore

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/admissiontest"
)

// fakeClock is a settable clock for MemoryOptions.Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.UnixMilli(1_800_000_000_000)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

func newMemory(t testing.TB, clock *fakeClock) *Memory {
	var opts MemoryOptions
	if clock != nil {
		opts.Now = clock.Now
	}
	s := NewMemory(opts)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestMemoryConcurrentLimitOne(t *testing.T) {
	const users, attempts, stock = 1000, 5, 100
	s := newMemory(t, nil)
	mustDefine(t, s, openAt(time.Now(), "rush", stock, 1))
	var (
		mu      sync.Mutex
		winners = map[string]int{}
		resv    = map[string]bool{}
		wg      sync.WaitGroup
	)
	for u := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			user := "user-" + strconv.Itoa(u)
			for a := range attempts {
				d, err := s.Admit(context.Background(), admission.Request{Activity: "rush", User: user, Qty: 1, RequestID: strconv.Itoa(a)})
				if err != nil {
					t.Errorf("admit: %v", err)
					return
				}
				if d.Outcome == admission.Won {
					mu.Lock()
					winners[user]++
					if resv[d.ReservationID] {
						t.Errorf("reservation %s handed out twice", d.ReservationID)
					}
					resv[d.ReservationID] = true
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	wins := 0
	for user, n := range winners {
		if n != 1 {
			t.Errorf("%s won %d times with limit 1", user, n)
		}
		wins += n
	}
	if wins != stock || len(winners) != stock {
		t.Errorf("%d wins by %d distinct users, want exactly %d", wins, len(winners), stock)
	}
	if n := mustRemaining(t, s, "rush"); n != 0 {
		t.Errorf("stock = %d, want 0", n)
	}
	snap, _ := s.Activity(context.Background(), "rush")
	if snap.Buyers != stock || snap.Sold != stock || snap.Queued != stock {
		t.Errorf("snapshot %+v", snap)
	}
}

func TestMemoryConcurrentMixedQty(t *testing.T) {
	const users, attempts, stock, limit = 300, 5, 200, 3
	s := newMemory(t, nil)
	mustDefine(t, s, openAt(time.Now(), "mixed", stock, limit))
	var (
		mu   sync.Mutex
		held = map[string]int64{}
		sold int64
		wg   sync.WaitGroup
	)
	for u := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			user := "user-" + strconv.Itoa(u)
			for a := range attempts {
				qty := int64(1 + (u+a)%3)
				d, err := s.Admit(context.Background(), admission.Request{Activity: "mixed", User: user, Qty: qty, RequestID: strconv.Itoa(a)})
				if err != nil {
					t.Errorf("admit: %v", err)
					return
				}
				if d.Outcome == admission.Won {
					mu.Lock()
					held[user] += qty
					sold += qty
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for user, n := range held {
		if n > limit {
			t.Errorf("%s holds %d items, limit %d", user, n, limit)
		}
	}
	if sold > stock {
		t.Fatalf("oversold: %d of %d", sold, stock)
	}
	if n := mustRemaining(t, s, "mixed"); n != stock-sold {
		t.Errorf("remaining = %d, sold %d of %d", n, sold, stock)
	}
	// With 300 users wanting up to 3 each, the sale must sell out apart from a remainder too small
	// for the requests that came after.
	if stock-sold > limit {
		t.Errorf("undersold: %d left", stock-sold)
	}
}

func TestMemoryConcurrentRelease(t *testing.T) {
	s := newMemory(t, nil)
	mustDefine(t, s, openAt(time.Now(), "a", 5, 2))
	won := mustAdmit(t, s, "a", "u1", 2, "r1")
	mustAdmit(t, s, "a", "u2", 1, "r1")
	var (
		wg  sync.WaitGroup
		yes atomic.Int32
	)
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := s.Release(context.Background(), "a", won.ReservationID)
			if err != nil {
				t.Errorf("release: %v", err)
			}
			if ok {
				yes.Add(1)
			}
		}()
	}
	wg.Wait()
	if yes.Load() != 1 {
		t.Errorf("%d releases succeeded, want 1", yes.Load())
	}
	snap, _ := s.Activity(context.Background(), "a")
	if snap.Remaining != 4 || snap.Buyers != 1 || snap.Sold != 1 {
		t.Errorf("after releasing 2 items: %+v, want remaining 4, 1 buyer", snap)
	}
	if _, err := s.Release(context.Background(), "a", "1-0"); !errors.Is(err, admission.ErrNotFound) {
		t.Errorf("unknown reservation: %v, want ErrNotFound", err)
	}
}

func TestMemoryWindowEdges(t *testing.T) {
	clock := newFakeClock()
	s := newMemory(t, clock)
	start := clock.Now().Add(time.Second)
	end := start.Add(time.Minute)
	mustDefine(t, s, admission.Activity{ID: "w", Stock: 5, Limit: 1, Start: start, End: end})

	clock.Set(start.Add(-time.Millisecond))
	if d := mustAdmit(t, s, "w", "u1", 1, "r"); d.Outcome != admission.NotStarted || d.Remaining != 5 {
		t.Errorf("1ms before start: %+v", d)
	}
	clock.Set(start) // inclusive
	if d := mustAdmit(t, s, "w", "u1", 1, "r"); d.Outcome != admission.Won {
		t.Errorf("at start: %+v", d)
	}
	clock.Set(end.Add(-time.Millisecond))
	if d := mustAdmit(t, s, "w", "u2", 1, "r"); d.Outcome != admission.Won {
		t.Errorf("1ms before end: %+v", d)
	}
	clock.Set(end) // exclusive
	if d := mustAdmit(t, s, "w", "u3", 1, "r"); d.Outcome != admission.Ended || d.Remaining != 3 {
		t.Errorf("at end: %+v", d)
	}
	// A replay is answered whatever the window says.
	if d := mustAdmit(t, s, "w", "u1", 1, "r"); d.Outcome != admission.Won || !d.Replayed {
		t.Errorf("replay after the end: %+v", d)
	}
	// qty above the limit is bad input, but only once the window is open (checks run in order).
	if _, err := s.Admit(context.Background(), admission.Request{Activity: "w", User: "u4", Qty: 2, RequestID: "r"}); err != nil {
		t.Errorf("qty above limit after the end: %v, want the ended answer", err)
	}
}

func TestMemoryDefineClock(t *testing.T) {
	clock := newFakeClock()
	s := newMemory(t, clock)
	ctx := context.Background()
	a := admission.Activity{ID: "d", Stock: 10, Limit: 1, Start: clock.Now().Add(time.Minute), End: clock.Now().Add(time.Hour), Salt: "given"}
	got := mustDefine(t, s, a)
	if got.Salt != "given" {
		t.Errorf("salt = %q, want the given one", got.Salt)
	}
	a.Stock, a.Salt = 20, ""
	if got := mustDefine(t, s, a); got.Salt != "given" || got.Stock != 20 {
		t.Errorf("redefinition without salt = %+v, want salt kept", got)
	}
	clock.Set(a.Start) // now >= start: running
	a.Stock = 30
	if _, err := s.Define(ctx, a, false); !errors.Is(err, admission.ErrActivityRunning) {
		t.Errorf("redefine at start: %v, want ErrActivityRunning", err)
	}
	a.Stock = 20
	if _, err := s.Define(ctx, a, false); err != nil {
		t.Errorf("identical redefinition while running: %v", err)
	}
	clock.Set(a.End) // ended: still refused for Define, allowed for Delete
	a.Stock = 30
	if _, err := s.Define(ctx, a, false); !errors.Is(err, admission.ErrActivityRunning) {
		t.Errorf("redefine after end: %v, want ErrActivityRunning", err)
	}
	if err := s.Delete(ctx, "d", false); err != nil {
		t.Errorf("delete after end: %v", err)
	}
}

var streamID = regexp.MustCompile(`^[0-9]+-[0-9]+$`)

// parseID splits a stream-like id.
func parseID(t *testing.T, id string) (ms, seq int64) {
	t.Helper()
	if !streamID.MatchString(id) {
		t.Fatalf("id %q is not <ms>-<seq>", id)
	}
	a, b, _ := strings.Cut(id, "-")
	ms, _ = strconv.ParseInt(a, 10, 64)
	seq, _ = strconv.ParseInt(b, 10, 64)
	return ms, seq
}

func TestMemoryReservationIDs(t *testing.T) {
	clock := newFakeClock()
	s := newMemory(t, clock)
	mustDefine(t, s, openAt(clock.Now(), "ids", 100, 1))
	var prevMS, prevSeq int64 = -1, -1
	for i := range 20 {
		switch i {
		case 5:
			clock.Add(3 * time.Millisecond)
		case 10:
			clock.Add(-time.Second) // the clock steps back: ids still grow
		}
		d := mustAdmit(t, s, "ids", "u"+strconv.Itoa(i), 1, "r")
		ms, seq := parseID(t, d.ReservationID)
		if ms < prevMS || (ms == prevMS && seq <= prevSeq) {
			t.Fatalf("id %s is not after %d-%d", d.ReservationID, prevMS, prevSeq)
		}
		prevMS, prevSeq = ms, seq
	}
	if prevMS != clock.Now().Add(time.Second).UnixMilli() {
		t.Errorf("ids after a backward step kept the last millisecond: got %d", prevMS)
	}
}

func TestMemoryRestocksFanOut(t *testing.T) {
	s := newMemory(t, nil)
	mustDefine(t, s, openAt(time.Now(), "a", 100, 1))
	mustDefine(t, s, openAt(time.Now(), "b", 100, 1))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slow, err := s.Restocks(ctx) // never read until the end
	if err != nil {
		t.Fatal(err)
	}
	fast, err := s.Restocks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var resv []string
	for i := range 50 {
		act := "a"
		if i%2 == 1 {
			act = "b"
		}
		resv = append(resv, act+"/"+mustAdmit(t, s, act, "u"+strconv.Itoa(i), 1, "r").ReservationID)
	}
	released := make(chan struct{})
	go func() {
		defer close(released)
		for _, r := range resv {
			act, id, _ := strings.Cut(r, "/")
			if _, err := s.Release(ctx, act, id); err != nil {
				t.Errorf("release: %v", err)
			}
		}
	}()
	select {
	case <-released:
	case <-time.After(10 * time.Second):
		t.Fatal("a subscriber that does not read blocked Release")
	}
	seen := map[string]bool{}
	deadline := time.After(5 * time.Second)
	for !seen["a"] || !seen["b"] {
		select {
		case id := <-fast:
			seen[id] = true
		case <-deadline:
			t.Fatalf("fast subscriber saw %v, want a and b", seen)
		}
	}
	// The slow subscriber gets both activities too, coalesced rather than dropped.
	got := map[string]int{}
	deadline = time.After(5 * time.Second)
	for got["a"] == 0 || got["b"] == 0 {
		select {
		case id := <-slow:
			got[id]++
		case <-deadline:
			t.Fatalf("slow subscriber saw %v, want a and b", got)
		}
	}
	if got["a"]+got["b"] > 4 {
		t.Errorf("slow subscriber got %v: restocks were not coalesced", got)
	}
	cancel()
	for range fast { // closed when ctx is done
	}
	for range slow {
	}
}

func TestMemoryClose(t *testing.T) {
	s := NewMemory(MemoryOptions{})
	mustDefine(t, s, openAt(time.Now(), "a", 1, 1))
	ch, err := s.Restocks(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureGroup(context.Background(), "a", "g"); err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := s.ReadGroup(context.Background(), "a", "g", "c", 1, time.Minute, false)
		read <- err
	}()
	time.Sleep(20 * time.Millisecond)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-read:
		if err == nil {
			t.Error("blocking read ended by Close without an error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a blocking read")
	}
	for range ch {
	}
	if _, err := s.Admit(context.Background(), admission.Request{Activity: "a", User: "u", Qty: 1, RequestID: "r"}); err == nil {
		t.Error("admit after Close succeeded")
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestMemoryCanceledContext(t *testing.T) {
	s := newMemory(t, nil)
	mustDefine(t, s, openAt(time.Now(), "a", 1, 1))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Admit(ctx, admission.Request{Activity: "a", User: "u", Qty: 1, RequestID: "r"}); !errors.Is(err, context.Canceled) {
		t.Errorf("admit with a canceled context: %v", err)
	}
	if n := mustRemaining(t, s, "a"); n != 1 {
		t.Errorf("a canceled admission took stock: %d left", n)
	}
}

func TestMemoryDeleteEndsBlockingRead(t *testing.T) {
	s := newMemory(t, nil)
	a := openAt(time.Now(), "a", 1, 1)
	mustDefine(t, s, a)
	if err := s.EnsureGroup(context.Background(), "a", "g"); err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := s.ReadGroup(context.Background(), "a", "g", "c", 1, time.Minute, false)
		read <- err
	}()
	time.Sleep(20 * time.Millisecond)
	if err := s.Delete(context.Background(), "a", true); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-read:
		if !errors.Is(err, admission.ErrUnknownActivity) {
			t.Errorf("read after delete: %v, want ErrUnknownActivity", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Delete did not end a blocking read")
	}
}

func ExampleMemory() {
	s := NewMemory(MemoryOptions{})
	defer s.Close()
	ctx := context.Background()
	now := time.Now()
	_, _ = s.Define(ctx, admission.Activity{ID: "phone-1001", Stock: 1, Limit: 1, Start: now, End: now.Add(time.Hour)}, false)
	for _, user := range []string{"alice", "bob"} {
		d, _ := s.Admit(ctx, admission.Request{Activity: "phone-1001", User: user, Qty: 1, RequestID: "1"})
		fmt.Println(user, d.Outcome, d.Remaining)
	}
	// Output:
	// alice queued 0
	// bob sold_out 0
}

// The same arguments redisstore.Store refuses with ErrBadInput are refused by Memory.
func TestMemoryArgumentChecks(t *testing.T) {
	s := newMemory(t, nil)
	ctx := context.Background()
	mustDefine(t, s, openAt(time.Now(), "a", 5, 1))
	if err := s.EnsureGroup(ctx, "a", "g"); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 2000)
	_, e1 := s.Remaining(ctx, "a{b}")
	_, e2 := s.Activity(ctx, "a:b")
	_, e3 := s.Release(ctx, "a", "")
	_, e4 := s.Release(ctx, "", "1-0")
	_, e5 := s.GetResult(ctx, "a", "")
	_, e6 := s.ReadGroup(ctx, "a", "g", "c", 1, -time.Second, false)
	_, e7 := s.Claim(ctx, "a", "g", "c", -time.Second, 1)
	_, e8 := s.DeadLetters(ctx, "a", 0)
	_, e9 := s.ReadGroup(ctx, "a", "g", long, 1, 0, false)
	for i, err := range []error{
		e1, e2, e3, e4, e5, e6, e7, e8, e9,
		s.Delete(ctx, "", true),
		s.SetResult(ctx, "a", "u", admission.Result{Code: "bogus"}),
		s.SetResult(ctx, "a", "", admission.Result{Code: "paid"}),
		s.EnsureGroup(ctx, "a", ""),
		s.Ack(ctx, "a", "g", ""),
		s.DeadLetter(ctx, "a", "g", admission.Win{ID: "1-0"}, long),
		s.DeadLetter(ctx, "a", "g", admission.Win{}, "reason"),
	} {
		if !errors.Is(err, admission.ErrBadInput) {
			t.Errorf("check %d: err = %v, want ErrBadInput", i+1, err)
		}
	}
	if err := s.Ack(ctx, "gone", "g", "1-0"); err != nil {
		t.Errorf("ack for an unknown activity: %v, want nil like XACK", err)
	}
	if err := s.DeadLetter(ctx, "a", "g", admission.Win{ID: "1-0"}, "x"); !errors.Is(err, admission.ErrNotFound) {
		t.Errorf("dead letter of an unknown entry: %v, want ErrNotFound", err)
	}
	if _, err := s.Claim(ctx, "a", "nogroup", "c", 0, 1); !errors.Is(err, admission.ErrNotFound) {
		t.Errorf("claim on an unknown group: %v, want ErrNotFound", err)
	}
	if err := s.EnsureGroup(ctx, "gone", "g"); !errors.Is(err, admission.ErrUnknownActivity) {
		t.Errorf("ensure group of an unknown activity: %v, want ErrUnknownActivity", err)
	}
}

// The suite's helpers, under this package's names.
var (
	openAt        = admissiontest.OpenAt
	mustDefine    = admissiontest.MustDefine
	mustAdmit     = admissiontest.MustAdmit
	mustRemaining = admissiontest.MustRemaining
)
