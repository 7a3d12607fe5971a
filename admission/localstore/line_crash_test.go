package localstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/waitroom"
)

// The line crash test's sale: its start comes a second and a half after the test's, so the first
// rounds take early joiners and the later ones late joiners.
const (
	lineActivity   = "line"
	lineUsers      = 200_000 // few joins repeat a user, most take a new place
	lineJoiners    = 16      // joining goroutines in the child
	lineIntervalMS = 2.0
	lineStartEnv   = "SECKILL_LOCAL_LINE_START"
)

// lineTerms are user's terms in the crash test's line.
func lineTerms(user string) waitroom.Terms {
	return waitroom.Terms{Draw: waitroom.Draw(lineActivity, user, "crash-salt"), IntervalMS: lineIntervalMS, SessionMS: 60_000}
}

// helperLine joins users from many goroutines until it is killed, printing every answer after it
// was returned: J user joined early rank offset.
func helperLine(dir string, fsyncAlways bool) error {
	startMS, err := strconv.ParseInt(os.Getenv(lineStartEnv), 10, 64)
	if err != nil {
		return fmt.Errorf("%s: %w", lineStartEnv, err)
	}
	s, err := Open(dir, Options{FsyncAlways: fsyncAlways, checkpointEvery: time.Duration(5+rand.IntN(30)) * time.Millisecond})
	if err != nil {
		return err
	}
	ctx := context.Background()
	start := time.UnixMilli(startMS)
	def := admission.Activity{ID: lineActivity, Stock: 10, Limit: 1, Start: start, End: start.Add(time.Hour), PayWithin: time.Minute}
	if _, err := s.Define(ctx, def, false); err != nil {
		return err
	}
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		fmt.Printf(format+"\n", args...) // one write per line: a kill never tears a line
		outMu.Unlock()
	}
	say("READY")
	for range lineJoiners {
		go func() {
			for {
				user := "u" + strconv.Itoa(rand.IntN(lineUsers))
				p, err := s.Join(ctx, lineActivity, user, lineTerms(user))
				if err != nil {
					say("E %v", err)
					os.Exit(3)
				}
				say("J %s %t %t %d %s", user, p.Joined, p.Early, p.Rank, strconv.FormatFloat(p.Offset, 'g', -1, 64))
			}
		}()
	}
	select {}
}

// linePlaceSaid is a place as the child answered it.
type linePlaceSaid struct {
	early  bool
	rank   int64 // -1: an early joiner before the draw
	offset float64
}

// TestLocalLineCrash SIGKILLs a child that joins the line from many goroutines, round after round,
// each kill once new places were answered; the first rounds come before the start (the lottery's
// pre-queue), the later ones after it. After each kill the reopened store has every place the
// child answered, as answered, and the line's ranks are 0..n-1 with no gap or repeat. Rounds
// alternate between FsyncAlways and the ring, as TestLocalCrash's do.
func TestLocalLineCrash(t *testing.T) {
	rounds := 8
	if os.Getenv("SECKILL_CHAOS") == "full" {
		rounds = 30
	}
	// The start leaves the first rounds time to join before it; on a machine too busy for that
	// the test begins again in a new folder with a longer lead.
	lead := 1500 * time.Millisecond
	dir := t.TempDir()
	start := time.Now().Add(lead)
	said := map[string]linePlaceSaid{}
	joined := map[string]bool{} // users answered "joined" in some round
	earlyRounds, lateRounds := 0, 0
	// At least three rounds after the start, however slow the machine.
	for round := 0; round < rounds || (lateRounds < 3 && round < 3*rounds); round++ {
		fsync := "0"
		if round%4 < 2 {
			fsync = "1"
		}
		p, lines := startHelper(t, "line", dir, helperSyncEnv+"="+fsync, lineStartEnv+"="+strconv.FormatInt(start.UnixMilli(), 10))
		waitLine(t, lines, "READY", nil)
		// Kill once at least 50 new places were answered, at a random moment after.
		var got []string
		fresh := 0
		for fresh < 50 {
			l := waitLine(t, lines, "J ", &got)
			if strings.Fields(l)[2] == "true" {
				fresh++
			}
		}
		drained := make(chan []string)
		go func() {
			var rest []string
			for l := range lines {
				rest = append(rest, l)
			}
			drained <- rest
		}()
		time.Sleep(time.Duration(rand.IntN(100)) * time.Millisecond)
		kill(t, p)
		got = append(got, <-drained...)
		early := 0
		for _, l := range got {
			f := strings.Fields(l)
			if len(f) != 6 || f[0] != "J" {
				t.Fatalf("round %d: the child said %q", round, l)
			}
			rank, err1 := strconv.ParseInt(f[4], 10, 64)
			offset, err2 := strconv.ParseFloat(f[5], 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("round %d: the child said %q", round, l)
			}
			pl := linePlaceSaid{early: f[3] == "true", rank: rank, offset: offset}
			if pl.early {
				early++
			}
			// The goroutines print in any order: a user's join may print after a second join's
			// answer that found the place, so only a second "joined" is a second place.
			old, ok := said[f[1]]
			if f[2] == "true" {
				if joined[f[1]] {
					t.Errorf("round %d: %s took a second place %+v; the first was %+v", round, f[1], pl, old)
				}
				joined[f[1]] = true
			}
			switch {
			case ok && (old.early != pl.early || old.offset != pl.offset || (old.rank >= 0 && pl.rank >= 0 && old.rank != pl.rank)):
				t.Errorf("round %d: %s answered %+v, earlier %+v", round, f[1], pl, old)
			case !ok || old.rank < 0:
				said[f[1]] = pl
			}
		}
		if round == 0 && early <= len(got)/2 && lead < 20*time.Second {
			lead *= 4
			t.Logf("round 0 came after the start: again with a lead of %s", lead)
			dir, said, joined, start = t.TempDir(), map[string]linePlaceSaid{}, map[string]bool{}, time.Now().Add(lead)
			round = -1
			continue
		}
		if early > len(got)/2 {
			earlyRounds++
		} else {
			lateRounds++
		}
		s := openLocal(t, dir, nil)
		checkLine(t, s, said, round, len(got))
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if t.Failed() {
			return
		}
	}
	if earlyRounds == 0 || lateRounds == 0 {
		t.Errorf("%d rounds mostly before the start, %d after: want both (a slow machine?)", earlyRounds, lateRounds)
	}
}

// checkLine checks the reopened line against every place the children answered.
func checkLine(t *testing.T, s *Store, said map[string]linePlaceSaid, round, lines int) {
	t.Helper()
	ctx := context.Background()
	for user, want := range said {
		p, err := s.Place(ctx, lineActivity, user)
		if err != nil {
			t.Errorf("round %d: answered place of %s (%+v) is lost: %v", round, user, want, err)
			continue
		}
		if p.Early != want.early || (!want.early && p.Offset != want.offset) || (want.rank >= 0 && p.Rank != want.rank) {
			t.Errorf("round %d: %s's place is %+v after the kill, answered %+v", round, user, p, want)
		}
	}
	a, err := s.cur.Load().mem.lock(lineActivity)
	if err != nil {
		t.Fatal(err)
	}
	l := &a.line
	a.mu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.places)
	if l.drawn {
		seen := make([]bool, n)
		for u, p := range l.places {
			if p.rank < 0 || p.rank >= int64(n) || seen[p.rank] {
				t.Errorf("round %d: %s has rank %d of %d: out of range or repeated", round, u, p.rank, n)
				return
			}
			seen[p.rank] = true
		}
	}
	for i := 1; i < len(l.late); i++ {
		if l.late[i] < l.late[i-1]+lineIntervalMS {
			t.Errorf("round %d: late places %d and %d at offsets %v and %v: closer than the interval", round, i-1, i, l.late[i-1], l.late[i])
		}
	}
	t.Logf("round %d: child said %d lines; %d places on disk (%d answered), %d early, %d late, drawn %v",
		round, lines, n, len(said), len(l.early), len(l.late), l.drawn)
}
