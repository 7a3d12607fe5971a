// Package linetest is the conformance suite every waitroom.Line passes, run against each store
// that keeps a line (redisstore.Store, localstore.Memory):
//
//	func TestLineConformance(t *testing.T) {
//		linetest.Run(t, func(t *testing.T) linetest.Store { return newMyStore(t) })
//	}
//
// The stores' clocks are real (Redis TIME), so the suite moves a sale's start by redefining the
// activity (force) rather than by waiting.
package linetest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/waitroom"
)

// Store is a store with a line; the suite defines its activities through its Catalog.
type Store interface {
	admission.Store
	waitroom.Line
}

// NewStore returns a fresh store with no activities. The suite closes it.
type NewStore func(t *testing.T) Store

// hourMS is the interval of a line that admits one buyer an hour: nobody's turn comes during a
// test unless the test puts it there.
const hourMS = float64(time.Hour / time.Millisecond)

// Run runs every conformance test against stores made by newStore.
func Run(t *testing.T, newStore NewStore) {
	tests := []struct {
		name string
		fn   func(*testing.T, Store)
	}{
		{"UnknownActivity", testUnknownActivity},
		{"BadInput", testBadInput},
		{"Lottery", testLottery},
		{"LateFirstComeFirstServed", testLate},
		{"EarlyThenLate", testEarlyThenLate},
		{"DrawnStaysDrawn", testDrawnStaysDrawn},
		{"LateAdmittedOnTime", testLateAdmittedOnTime},
		{"ConcurrentEarly", testConcurrentEarly},
		{"ConcurrentLate", testConcurrentLate},
		{"Tally", testTally},
		{"TermsOfTheFirstJoin", testTermsOfFirstJoin},
		{"DeleteDropsLine", testDelete},
		{"SpentProofs", testSpentProofs},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			t.Cleanup(func() { _ = s.Close() })
			tc.fn(t, s)
		})
	}
}

// define defines activity id starting at start (an hour-long window), failing the test on an
// error; force moves the start of an existing one.
func define(t *testing.T, s Store, id string, start time.Time, force bool) {
	t.Helper()
	a := admission.Activity{ID: id, Stock: 10, Limit: 1, Start: start, End: start.Add(time.Hour), PayWithin: time.Minute}
	if _, err := s.Define(context.Background(), a, force); err != nil {
		t.Fatalf("define %s: %v", id, err)
	}
}

func join(t *testing.T, s Store, act, user string, draw, interval float64) waitroom.Place {
	t.Helper()
	p, err := s.Join(context.Background(), act, user, waitroom.Terms{Draw: draw, IntervalMS: interval, SessionMS: 60_000})
	if err != nil {
		t.Fatalf("join %s %s: %v", act, user, err)
	}
	return p
}

func place(t *testing.T, s Store, act, user string) waitroom.Place {
	t.Helper()
	p, err := s.Place(context.Background(), act, user)
	if err != nil {
		t.Fatalf("place %s %s: %v", act, user, err)
	}
	return p
}

// open moves act's start a second into the past: the lottery is drawn.
func open(t *testing.T, s Store, act string) {
	t.Helper()
	define(t, s, act, time.Now().Add(-time.Second), true)
}

func testUnknownActivity(t *testing.T, s Store) {
	ctx := context.Background()
	if _, err := s.Join(ctx, "nope", "u", waitroom.Terms{Draw: 0.5, IntervalMS: 10, SessionMS: 60_000}); !errors.Is(err, admission.ErrUnknownActivity) {
		t.Fatalf("join unknown activity: %v, want ErrUnknownActivity", err)
	}
	if _, err := s.Place(ctx, "nope", "u"); !errors.Is(err, admission.ErrUnknownActivity) {
		t.Fatalf("place in unknown activity: %v, want ErrUnknownActivity", err)
	}
	if _, err := s.Tally(ctx, "nope"); !errors.Is(err, admission.ErrUnknownActivity) {
		t.Fatalf("tally unknown activity: %v, want ErrUnknownActivity", err)
	}
	define(t, s, "a", time.Now().Add(time.Hour), false)
	if _, err := s.Place(ctx, "a", "u"); !errors.Is(err, waitroom.ErrNotInLine) {
		t.Fatalf("place of a user who never joined: %v, want ErrNotInLine", err)
	}
}

func testBadInput(t *testing.T, s Store) {
	ctx := context.Background()
	define(t, s, "a", time.Now().Add(time.Hour), false)
	for _, tc := range []struct {
		act, user string
		terms     waitroom.Terms
	}{
		{"a", "", waitroom.Terms{Draw: 0.5, IntervalMS: 10, SessionMS: 60_000}},
		{"a", "u\x00v", waitroom.Terms{Draw: 0.5, IntervalMS: 10, SessionMS: 60_000}},
		{"a", "u", waitroom.Terms{Draw: 1, IntervalMS: 10, SessionMS: 60_000}},
		{"a", "u", waitroom.Terms{Draw: -0.1, IntervalMS: 10, SessionMS: 60_000}},
		{"a", "u", waitroom.Terms{Draw: 0.5, IntervalMS: 0, SessionMS: 60_000}},
		{"a b", "u", waitroom.Terms{Draw: 0.5, IntervalMS: 10, SessionMS: 60_000}},
		{"a", "u", waitroom.Terms{Draw: 0.5, IntervalMS: 10}},
	} {
		if _, err := s.Join(ctx, tc.act, tc.user, tc.terms); !errors.Is(err, admission.ErrBadInput) {
			t.Errorf("join %q %q %+v: %v, want ErrBadInput", tc.act, tc.user, tc.terms, err)
		}
	}
	if tl, err := s.Tally(ctx, "a"); err != nil || tl.Length != 0 || tl.IntervalMS != 0 || tl.SessionMS != 0 {
		t.Fatalf("after bad joins: tally %+v, %v; want an empty line, without terms", tl, err)
	}
}

// testTermsOfFirstJoin: the first join fixes the line's terms, and later joins' (from a gateway
// configured otherwise, a reload under way) change nothing: the late joiners follow the lottery
// and each other at the line's interval, and every read tells the line's terms.
func testTermsOfFirstJoin(t *testing.T, s Store) {
	ctx := context.Background()
	define(t, s, "a", time.Now().Add(time.Hour), false)
	if tl, err := s.Tally(ctx, "a"); err != nil || tl.IntervalMS != 0 || tl.SessionMS != 0 {
		t.Fatalf("tally before the first join: %+v, %v; want no terms", tl, err)
	}
	first := join(t, s, "a", "e", 0.5, hourMS)
	if first.IntervalMS != hourMS || first.SessionMS != 60_000 {
		t.Fatalf("the first join: %+v; want the line's terms, its own: %v ms, 60000 ms", first, hourMS)
	}
	other := waitroom.Terms{Draw: 0.1, IntervalMS: 10, SessionMS: 1000}
	if p, err := s.Join(ctx, "a", "e2", other); err != nil || p.IntervalMS != hourMS || p.SessionMS != 60_000 {
		t.Fatalf("an early join with other terms: %+v, %v; want the line's", p, err)
	}
	open(t, s, "a")
	for i, want := range []float64{2 * hourMS, 3 * hourMS} {
		p, err := s.Join(ctx, "a", fmt.Sprint("late", i), other)
		if err != nil || p.Offset != want || p.IntervalMS != hourMS || p.SessionMS != 60_000 {
			t.Fatalf("late joiner %d with other terms: %+v, %v; want offset %v (the lottery's two, then an hour each)", i, p, err, want)
		}
	}
	if p := place(t, s, "a", "e"); p.IntervalMS != hourMS || p.SessionMS != 60_000 {
		t.Errorf("a read: %+v; want the line's terms", p)
	}
	if tl, err := s.Tally(ctx, "a"); err != nil || tl.IntervalMS != hourMS || tl.SessionMS != 60_000 {
		t.Errorf("tally: %+v, %v; want the line's terms", tl, err)
	}
}

// testLottery: early joiners are ranked by their draws, not by when they joined, and a second
// join keeps the first place.
func testLottery(t *testing.T, s Store) {
	define(t, s, "a", time.Now().Add(time.Hour), false)
	const n = 20
	draws := make([]float64, n)
	for i := range draws {
		draws[i] = float64(n-1-i) / n // the first joiner draws last
	}
	for i := range n {
		p := join(t, s, "a", fmt.Sprint("u", i), draws[i], hourMS)
		if !p.Joined || !p.Early || p.Rank != -1 || p.EarlyCount != int64(i+1) {
			t.Fatalf("early join %d: %+v; want joined, early, rank -1, %d early", i, p, i+1)
		}
	}
	again := join(t, s, "a", "u0", 0, hourMS)
	if again.Joined || !again.Early || again.EarlyCount != n {
		t.Fatalf("second join of u0: %+v; want the first place kept", again)
	}
	open(t, s, "a")
	for i := range n {
		p := place(t, s, "a", fmt.Sprint("u", i))
		if want := int64(n - 1 - i); p.Rank != want || !p.Early || p.EarlyCount != n {
			t.Fatalf("u%d after the start: %+v; want rank %d by its draw", i, p, want)
		}
	}
	// u0 joined first with the highest draw; joining again, now with draw 0, keeps its place.
	if p := join(t, s, "a", "u0", 0, hourMS); p.Joined || p.Rank != n-1 {
		t.Fatalf("u0 joining again after the start: %+v; want its place %d kept", p, n-1)
	}
}

// testLate: after the start, joiners line up in join order, each an interval after the last.
func testLate(t *testing.T, s Store) {
	start := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	define(t, s, "a", start, false)
	var prev waitroom.Place
	for i := range 5 {
		p := join(t, s, "a", fmt.Sprint("u", i), 0.5, hourMS)
		if !p.Joined || p.Early || p.Rank != int64(i) || p.EarlyCount != 0 {
			t.Fatalf("late join %d: %+v; want joined, late, rank %d", i, p, i)
		}
		if i == 0 {
			since := float64(p.Now.Sub(start).Milliseconds())
			if p.Offset < since-1000 || p.Offset > since+1 || p.LateAdmitted != 1 {
				t.Fatalf("first late joiner of an empty line: %+v; want admitted at once (offset ≈ %v)", p, since)
			}
		} else if p.Offset != prev.Offset+hourMS || p.LateAdmitted != 1 {
			t.Fatalf("late join %d: offset %v, admitted %d; want %v (an interval after the last), 1 admitted",
				i, p.Offset, p.LateAdmitted, prev.Offset+hourMS)
		}
		prev = p
	}
	if p := join(t, s, "a", "u2", 0.1, hourMS); p.Joined || p.Rank != 2 {
		t.Fatalf("u2 joining again: %+v; want rank 2 kept", p)
	}
}

// testEarlyThenLate: the first late joiner's turn comes after every early joiner's.
func testEarlyThenLate(t *testing.T, s Store) {
	define(t, s, "a", time.Now().Add(time.Hour), false)
	for i := range 3 {
		join(t, s, "a", fmt.Sprint("e", i), float64(i)/3, hourMS)
	}
	open(t, s, "a")
	p := join(t, s, "a", "late", 0.1, hourMS)
	if !p.Joined || p.Early || p.Rank != 3 || p.EarlyCount != 3 || p.Offset != 3*hourMS || p.LateAdmitted != 0 {
		t.Fatalf("first late joiner after 3 early ones: %+v; want rank 3, offset %v, none admitted", p, 3*hourMS)
	}
	if p := join(t, s, "a", "e1", 0.9, hourMS); p.Joined || !p.Early || p.Rank != 1 {
		t.Fatalf("early joiner joining again late: %+v; want its early rank 1", p)
	}
}

// testDrawnStaysDrawn: once the start has passed and the early joiners' ranks were read, a forced
// redefinition that moves the start later does not reopen the lottery: a newcomer lines up behind
// (late), and no rank already told moves.
func testDrawnStaysDrawn(t *testing.T, s Store) {
	define(t, s, "a", time.Now().Add(time.Hour), false)
	join(t, s, "a", "e0", 0.5, hourMS)
	join(t, s, "a", "e1", 0.6, hourMS)
	open(t, s, "a")
	if p := place(t, s, "a", "e0"); p.Rank != 0 {
		t.Fatalf("e0 after the start: %+v; want rank 0", p)
	}
	if p := place(t, s, "a", "e1"); p.Rank != 1 {
		t.Fatalf("e1 after the start: %+v; want rank 1", p)
	}
	define(t, s, "a", time.Now().Add(time.Hour), true) // the start moved later
	if p := join(t, s, "a", "new", 0.1, hourMS); !p.Joined || p.Early || p.Rank != 2 {
		t.Fatalf("a joiner once the line was drawn, the start moved later: %+v; want late, rank 2", p)
	}
	open(t, s, "a")
	for user, want := range map[string]int64{"e0": 0, "e1": 1, "new": 2} {
		if p := place(t, s, "a", user); p.Rank != want {
			t.Errorf("%s after the start came again: %+v; want the rank told before, %d", user, p, want)
		}
	}
}

// testLateAdmittedOnTime: a late joiner behind others is admitted once its offset has come.
func testLateAdmittedOnTime(t *testing.T, s Store) {
	define(t, s, "a", time.Now().Add(-time.Minute), false)
	const interval = 300 // ms
	join(t, s, "a", "first", 0.5, interval)
	second := join(t, s, "a", "second", 0.5, interval)
	deadline := time.Now().Add(30 * time.Second)
	for {
		p := place(t, s, "a", "second")
		if p.LateAdmitted == 2 {
			break
		}
		if p.LateAdmitted != 1 {
			t.Fatalf("second's place: %+v; want 1 then 2 admitted", p)
		}
		if time.Now().After(deadline) {
			t.Fatalf("second (offset %v) not admitted within 30 s: %+v", second.Offset, p)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// testConcurrentEarly: many goroutines joining the same users before the start: one place each,
// and after the start the ranks are 0..n-1 in the order of the draws.
func testConcurrentEarly(t *testing.T, s Store) {
	define(t, s, "a", time.Now().Add(time.Hour), false)
	const users = 200
	draws := make([]float64, users)
	for i := range draws {
		draws[i] = rand.Float64()
	}
	hammer(t, users, 8, func(u int) error {
		_, err := s.Join(context.Background(), "a", fmt.Sprint("u", u), waitroom.Terms{Draw: draws[u], IntervalMS: hourMS, SessionMS: 60_000})
		return err
	})
	open(t, s, "a")
	ranks := make([]int64, users)
	for u := range users {
		p := place(t, s, "a", fmt.Sprint("u", u))
		if !p.Early || p.EarlyCount != users {
			t.Fatalf("u%d: %+v; want early among %d", u, p, users)
		}
		ranks[u] = p.Rank
	}
	order := make([]int, users)
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(draws[a], draws[b]), cmp.Compare(fmt.Sprint("u", a), fmt.Sprint("u", b)))
	})
	for want, u := range order {
		if ranks[u] != int64(want) {
			t.Fatalf("u%d (draw %v) has rank %d, want %d by draw", u, draws[u], ranks[u], want)
		}
	}
}

// testConcurrentLate: many goroutines joining the same users after the start: one place each,
// ranks 0..n-1 with no gap or repeat, offsets an interval apart in rank order.
func testConcurrentLate(t *testing.T, s Store) {
	define(t, s, "a", time.Now().Add(-time.Minute), false)
	const users = 200
	var mu sync.Mutex
	first := map[int]waitroom.Place{}
	hammer(t, users, 8, func(u int) error {
		p, err := s.Join(context.Background(), "a", fmt.Sprint("u", u), waitroom.Terms{Draw: 0.5, IntervalMS: hourMS, SessionMS: 60_000})
		if err == nil && p.Joined {
			mu.Lock()
			defer mu.Unlock()
			if _, dup := first[u]; dup {
				return fmt.Errorf("u%d joined twice", u)
			}
			first[u] = p
		}
		return err
	})
	if len(first) != users {
		t.Fatalf("%d users joined, want %d", len(first), users)
	}
	byRank := make([]waitroom.Place, users)
	seen := make([]bool, users)
	for u, p := range first {
		if p.Rank < 0 || p.Rank >= users || seen[p.Rank] {
			t.Fatalf("u%d has rank %d: out of range or taken twice", u, p.Rank)
		}
		seen[p.Rank] = true
		byRank[p.Rank] = p
		if again := place(t, s, "a", fmt.Sprint("u", u)); again.Rank != p.Rank || again.Offset != p.Offset {
			t.Fatalf("u%d: read %+v after joining %+v", u, again, p)
		}
	}
	for r := 1; r < users; r++ {
		if got, want := byRank[r].Offset, byRank[r-1].Offset+hourMS; got != want {
			t.Fatalf("rank %d has offset %v, want %v: an interval after rank %d", r, got, want, r-1)
		}
	}
}

// hammer calls join for every user from each of workers goroutines, each in its own order.
func hammer(t *testing.T, users, workers int, join func(u int) error) {
	t.Helper()
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, u := range rand.Perm(users) {
				if err := join(u); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func testTally(t *testing.T, s Store) {
	ctx := context.Background()
	define(t, s, "a", time.Now().Add(time.Hour), false)
	// An interval of 1 ms (the line's, its first join's): the late joiners are both due at once.
	for i := range 3 {
		join(t, s, "a", fmt.Sprint("e", i), 0.5, 1)
	}
	open(t, s, "a")
	for i := range 2 {
		join(t, s, "a", fmt.Sprint("l", i), 0.5, 1)
	}
	var tl waitroom.Tally
	var err error
	deadline := time.Now().Add(30 * time.Second)
	for {
		tl, err = s.Tally(ctx, "a", 0, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if tl.LateAdmitted[0] == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if tl.Length != 5 || tl.EarlyCount != 3 || !slices.Equal(tl.LateAdmitted, []int64{2, 0}) {
		t.Fatalf("tally: %+v; want 5 joined, 3 early, late admitted [2 0] (now, an hour ago)", tl)
	}
}

func testDelete(t *testing.T, s Store) {
	ctx := context.Background()
	define(t, s, "a", time.Now().Add(time.Hour), false)
	join(t, s, "a", "u", 0.5, hourMS)
	if err := s.Delete(ctx, "a", true); err != nil {
		t.Fatal(err)
	}
	define(t, s, "a", time.Now().Add(time.Hour), false)
	if _, err := s.Place(ctx, "a", "u"); !errors.Is(err, waitroom.ErrNotInLine) {
		t.Fatalf("place after the activity was deleted and defined again: %v, want ErrNotInLine", err)
	}
	if tl, err := s.Tally(ctx, "a"); err != nil || tl.Length != 0 {
		t.Fatalf("tally after delete: %+v, %v; want an empty line", tl, err)
	}
}
