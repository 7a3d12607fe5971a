package localstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/waitroom"
)

// lineScenario puts every kind of line state into s (the scenario's last part): early joiners
// not yet drawn (w), late joiners only (x), early joiners drawn at a read then late ones (y), and
// a line dropped with its activity, which is defined again (z).
func lineScenario(s admission.Store, l waitroom.Line, clock *fakeClock) error {
	ctx := context.Background()
	now := clock.Now()
	def := func(id string, start time.Time, force bool) error {
		_, err := s.Define(ctx, admission.Activity{ID: id, Stock: 5, Limit: 1, Start: start, End: start.Add(time.Hour), PayWithin: time.Minute}, force)
		return err
	}
	join := func(act, user string, draw, interval float64) error {
		p, err := l.Join(ctx, act, user, waitroom.Terms{Draw: draw, IntervalMS: interval, SessionMS: 60_000})
		if err == nil && !p.Joined {
			err = fmt.Errorf("join %s/%s: the place was taken before", act, user)
		}
		clock.Add(time.Millisecond)
		return err
	}
	for _, id := range []string{"w", "y", "z"} {
		if err := def(id, now.Add(30*time.Second), false); err != nil {
			return err
		}
	}
	if err := def("x", now.Add(-time.Second), false); err != nil {
		return err
	}
	for i, draw := range []float64{0.9, 0.1, 0.5, 0.3} {
		if err := join("w", fmt.Sprint("e", i), draw, 250); err != nil {
			return err
		}
		if err := join("y", fmt.Sprint("e", i), 1-draw, 100); err != nil {
			return err
		}
	}
	for i := range 3 {
		if err := join("x", fmt.Sprint("l", i), 0.5, 250); err != nil {
			return err
		}
	}
	if err := join("z", "gone", 0.5, 250); err != nil {
		return err
	}
	if err := s.Delete(ctx, "z", true); err != nil {
		return err
	}
	if err := def("z", now.Add(30*time.Second), false); err != nil {
		return err
	}
	clock.Add(31 * time.Second) // w's and y's start passes; a read of y draws its line
	if _, err := l.Place(ctx, "y", "e0"); err != nil {
		return err
	}
	// y's start moves later again (forced): drawn, it takes no more early joiners.
	if err := def("y", clock.Now().Add(time.Minute), true); err != nil {
		return err
	}
	if err := join("y", "late", 0.5, 100); err != nil {
		return err
	}
	return join("x", "l3", 0.5, 250)
}

// TestLocalLineReopen: a closed and reopened store, and one whose process was killed, keep every
// place: the same rank, offset and lottery, a second join keeps the place, and the next late
// joiner follows the last one by an interval.
func TestLocalLineReopen(t *testing.T) {
	ctx := context.Background()
	check := func(t *testing.T, s *Store, clock *fakeClock) {
		t.Helper()
		for _, tc := range []struct {
			act, user string
			early     bool
			rank      int64
		}{
			{"w", "e1", true, 0}, {"w", "e3", true, 1}, {"w", "e2", true, 2}, {"w", "e0", true, 3},
			{"y", "e0", true, 0}, {"y", "late", false, 4},
			{"x", "l0", false, 0}, {"x", "l3", false, 3},
		} {
			p, err := s.Place(ctx, tc.act, tc.user)
			if err != nil || p.Early != tc.early || p.Rank != tc.rank {
				t.Errorf("%s/%s after reopen: %+v, %v; want early %v, rank %d", tc.act, tc.user, p, err, tc.early, tc.rank)
			}
		}
		// The terms of each line's first join are kept.
		for act, interval := range map[string]float64{"w": 250, "x": 250, "y": 100} {
			tl, err := s.Tally(ctx, act)
			if err != nil || tl.IntervalMS != interval || tl.SessionMS != 60_000 {
				t.Errorf("%s's terms after reopen: %+v, %v; want %v ms, 60000 ms", act, tl, err, interval)
			}
		}
		if _, err := s.Place(ctx, "z", "gone"); !errors.Is(err, waitroom.ErrNotInLine) {
			t.Errorf("z/gone, whose line was deleted: %v; want ErrNotInLine", err)
		}
		last, err := s.Place(ctx, "x", "l3")
		if err != nil {
			t.Fatal(err)
		}
		if p, err := s.Join(ctx, "x", "l1", waitroom.Terms{Draw: 0.1, IntervalMS: 250, SessionMS: 60_000}); err != nil || p.Joined || p.Rank != 1 {
			t.Errorf("l1 joining again: %+v, %v; want rank 1 kept", p, err)
		}
		x, err := s.Activity(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		p, err := s.Join(ctx, "x", "l4", waitroom.Terms{Draw: 0.1, IntervalMS: 250, SessionMS: 60_000})
		// An interval after the last, or now when the line has moved past that.
		want := math.Max(last.Offset+250, float64(p.Now.UnixMilli()-x.Start.UnixMilli()))
		if err != nil || !p.Joined || p.Rank != 4 || p.Offset != want {
			t.Errorf("the next late joiner: %+v, %v; want rank 4 at offset %v", p, err, want)
		}
		// y was drawn before its start moved later: a newcomer is late, never among the drawn.
		p, err = s.Join(ctx, "y", "newcomer", waitroom.Terms{Draw: 0, IntervalMS: 100, SessionMS: 60_000})
		if err != nil || p.Early || p.Rank != 5 {
			t.Errorf("a newcomer in y: %+v, %v; want late at rank 5", p, err)
		}
	}
	t.Run("closed", func(t *testing.T) {
		dir := t.TempDir()
		clock := newFakeClock()
		s := openLocal(t, dir, clock)
		if err := scenario(s, clock); err != nil {
			t.Fatal(err)
		}
		s = reopenSame(t, s, dir, clock)
		check(t, s, clock)
		reopenSame(t, s, dir, clock)
	})
	t.Run("killed", func(t *testing.T) {
		dir := t.TempDir()
		p, lines := startHelper(t, "scenario", dir)
		line := waitLine(t, lines, "DUMP ", nil)
		kill(t, p)
		clock := newFakeClock()
		clock.Add(2 * time.Minute)
		s := openLocal(t, dir, clock)
		defer s.Close()
		if got, want := dumpJSON(t, s.cur.Load().mem), line[len("DUMP "):]; got != want {
			t.Fatalf("state after SIGKILL and reopen:\n%s\nthe child's before the kill:\n%s", got, want)
		}
		check(t, s, clock)
	})
}
