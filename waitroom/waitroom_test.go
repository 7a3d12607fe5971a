package waitroom_test

import (
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/ratelimit"
	"github.com/caddy-seckill/caddy-seckill/waitroom"
)

func mustRoom(t *testing.T, admit string, session time.Duration) *waitroom.Room {
	t.Helper()
	r, err := waitroom.ParseAdmit(admit)
	if err != nil {
		t.Fatal(err)
	}
	room, err := waitroom.New(waitroom.Config{Opens: time.Minute, Admit: r, Session: session})
	if err != nil {
		t.Fatal(err)
	}
	return room
}

func TestNewDefaultsAndBounds(t *testing.T) {
	room, err := waitroom.New(waitroom.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := room.Config()
	if c.Opens != waitroom.DefaultOpens || c.Session != waitroom.DefaultSession || c.Admit.Events != 200 || c.Admit.Period != time.Second || room.IntervalMS() != 5 {
		t.Fatalf("defaults: %+v, interval %v ms", c, room.IntervalMS())
	}
	one, _ := waitroom.ParseAdmit("1/s")
	for _, bad := range []waitroom.Config{
		{Opens: -time.Second, Admit: one},
		{Opens: time.Millisecond, Admit: one},
		{Opens: 8 * 24 * time.Hour, Admit: one},
		{Admit: one, Session: time.Millisecond},
		{Admit: one, Session: 25 * time.Hour},
		{Admit: one, ProofBits: -1},
		{Admit: one, ProofBits: 29},
		{Admit: one, Session: time.Minute, Opens: time.Minute},
		{Admit: one, Session: time.Minute, ProofBits: 28},
	} {
		_, err := waitroom.New(bad)
		if (err == nil) != (bad.Session == time.Minute) {
			t.Errorf("New(%+v): %v", bad, err)
		}
	}
	for _, s := range []string{"", "0/s", "x/s", "10/s burst 3", "10", "5/-1s"} {
		if _, err := waitroom.ParseAdmit(s); err == nil {
			t.Errorf("ParseAdmit(%q) accepted", s)
		}
	}
	if _, err := waitroom.New(waitroom.Config{Admit: ratelimit.Rate{Events: 2_000_000, Period: time.Second}}); err == nil {
		t.Error("a rate above the bound was accepted")
	}
}

func TestDrawIsStableAndSalted(t *testing.T) {
	a := waitroom.Draw("act", "alice", "salt")
	if a != waitroom.Draw("act", "alice", "salt") || a < 0 || a >= 1 {
		t.Fatalf("draw %v: want a stable value in [0, 1)", a)
	}
	if a == waitroom.Draw("act", "alice", "other salt") || a == waitroom.Draw("act", "bob", "salt") ||
		a == waitroom.Draw("act2", "alice", "salt") {
		t.Fatal("the draw does not depend on the salt, the user and the activity")
	}
}

func TestStatus(t *testing.T) {
	room := mustRoom(t, "10/s", time.Minute) // an admission every 100 ms
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return start.Add(d) }
	for _, tc := range []struct {
		name   string
		p      waitroom.Place
		closed bool
		want   waitroom.Status
	}{
		{"early before the draw", waitroom.Place{Now: at(-time.Minute), Early: true, Rank: -1, EarlyCount: 10},
			false, waitroom.Status{State: waitroom.Waiting, ETA: time.Minute + 500*time.Millisecond, Refresh: 15 * time.Second}},
		{"early rank 0 at the start", waitroom.Place{Now: at(0), Early: true, Rank: 0, EarlyCount: 10},
			false, waitroom.Status{State: waitroom.Admitted, Position: 1, AdmittedAt: at(0), Until: at(time.Minute), Refresh: 15 * time.Second}},
		{"early rank 5 at 250 ms", waitroom.Place{Now: at(250 * time.Millisecond), Early: true, Rank: 5, EarlyCount: 10},
			false, waitroom.Status{State: waitroom.Waiting, Position: 6, Ahead: 2, ETA: 250 * time.Millisecond, Refresh: 270 * time.Millisecond}},
		{"late behind everyone", waitroom.Place{Now: at(time.Second), Rank: 12, Offset: 1200, EarlyCount: 10, LateAdmitted: 1},
			false, waitroom.Status{State: waitroom.Waiting, Position: 13, Ahead: 1, ETA: 200 * time.Millisecond, Refresh: 220 * time.Millisecond}},
		{"late, two seconds to go", waitroom.Place{Now: at(time.Second), Rank: 30, Offset: 3000, EarlyCount: 10},
			false, waitroom.Status{State: waitroom.Waiting, Position: 31, Ahead: 20, ETA: 2 * time.Second, Refresh: time.Second}},
		{"early, the draw 400 ms away", waitroom.Place{Now: at(-400 * time.Millisecond), Early: true, Rank: -1, EarlyCount: 10},
			false, waitroom.Status{State: waitroom.Waiting, ETA: 900 * time.Millisecond, Refresh: 420 * time.Millisecond}},
		{"session over", waitroom.Place{Now: at(2 * time.Minute), Rank: 12, Offset: 1200, EarlyCount: 10, LateAdmitted: 3},
			false, waitroom.Status{State: waitroom.Expired, Position: 13, AdmittedAt: at(1200 * time.Millisecond), Until: at(time.Minute + 1200*time.Millisecond)}},
		{"sold out while waiting", waitroom.Place{Now: at(time.Second), Rank: 12, Offset: 1200, EarlyCount: 10},
			true, waitroom.Status{State: waitroom.Closed, Position: 13}},
	} {
		if got := room.Status(tc.p, start, tc.closed); got != tc.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}

func TestEarlyServed(t *testing.T) {
	for _, tc := range []struct {
		since time.Duration
		want  int64
	}{{-time.Second, 0}, {0, 1}, {99 * time.Millisecond, 1}, {100 * time.Millisecond, 2}, {time.Hour, 7}} {
		if got := waitroom.EarlyServed(7, tc.since, 100); got != tc.want {
			t.Errorf("EarlyServed(7, %s) = %d, want %d", tc.since, got, tc.want)
		}
	}
}

// TestStatusFollowsTheLine checks that two gateways configured with different terms (a reload
// under way on one of them) tell a buyer the same status: the line's terms, its first join's,
// not each gateway's own. A line that kept none moves at the room's.
func TestStatusFollowsTheLine(t *testing.T) {
	start := time.UnixMilli(1_700_000_000_000)
	slow, fast := mustRoom(t, "1/h", time.Hour), mustRoom(t, "10/s", time.Second)
	for _, p := range []waitroom.Place{
		// the second of the lottery, 150 ms after the start, in a line opened at 10/s for an hour
		{Now: start.Add(150 * time.Millisecond), Early: true, Rank: 1, EarlyCount: 2, IntervalMS: 100, SessionMS: 3_600_000},
		// a late joiner admitted 200 ms after the start, 2 s later
		{Now: start.Add(2200 * time.Millisecond), Rank: 2, Offset: 200, EarlyCount: 2, LateAdmitted: 1, IntervalMS: 100, SessionMS: 3_600_000},
	} {
		a, b := slow.Status(p, start, false), fast.Status(p, start, false)
		if a != b || a.State != waitroom.Admitted || a.Until.Sub(a.AdmittedAt) != time.Hour {
			t.Errorf("place %+v: one gateway says %+v, the other %+v; want both admitted for the line's hour", p, a, b)
		}
	}
	// No terms kept: the room's own.
	p := waitroom.Place{Now: start.Add(150 * time.Millisecond), Early: true, Rank: 1, EarlyCount: 2}
	if s := slow.Status(p, start, false); s.State != waitroom.Waiting {
		t.Errorf("a line without terms at 1/h: %+v; want waiting", s)
	}
}

func TestSameTerms(t *testing.T) {
	room := mustRoom(t, "200/s", time.Minute)
	for _, tc := range []struct {
		interval float64
		session  int64
		want     bool
	}{{5, 60_000, true}, {0, 0, true}, {5.000000000001, 60_000, true}, {10, 60_000, false}, {5, 1000, false}} {
		if got := room.SameTerms(tc.interval, tc.session); got != tc.want {
			t.Errorf("SameTerms(%v, %v) = %v, want %v", tc.interval, tc.session, got, tc.want)
		}
	}
	for interval, want := range map[float64]string{5: "200/s", 1000: "1/s", 6000: "10/m", 3_600_000: "1/h"} {
		if got := waitroom.FormatInterval(interval); got != want {
			t.Errorf("FormatInterval(%v) = %q, want %q", interval, got, want)
		}
	}
}
