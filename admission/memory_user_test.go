package admission

import (
	"context"
	"slices"
	"strconv"
	"testing"
)

// A user who wins, releases and wins again, more often than a memUser keeps answers in its slice
// (memUserAnswers), keeps the first answer to every request id, counts as a buyer only while
// holding an item, and a local store's load rebuilds all of it.
func TestMemoryManyWinsOneUser(t *testing.T) {
	const rounds = 3*memUserAnswers + 1
	run := func(t *testing.T, s Store) []Decision {
		ctx := context.Background()
		mustAdmit(t, s, "m", "v", 1, "v1") // v holds throughout
		var wins []Decision
		for i := range rounds {
			d := mustAdmit(t, s, "m", "u", 1, "r"+strconv.Itoa(i))
			if d.Outcome != Won {
				t.Fatalf("round %d: %+v", i, d)
			}
			wins = append(wins, d)
			checkBuyers(t, s, "u", "v")
			if d := mustAdmit(t, s, "m", "u", 1, "extra"); d.Outcome != LimitReached {
				t.Fatalf("round %d: second item = %+v", i, d)
			}
			if ok, err := s.Release(ctx, "m", d.ReservationID); !ok || err != nil {
				t.Fatalf("round %d: release = %v, %v", i, ok, err)
			}
			checkBuyers(t, s, "v")
		}
		return wins
	}
	replays := func(t *testing.T, s Store, wins []Decision) {
		for i, w := range wins {
			d := mustAdmit(t, s, "m", "u", 1, "r"+strconv.Itoa(i))
			if !d.Replayed || d.Outcome != Won || d.ReservationID != w.ReservationID || d.Remaining != w.Remaining {
				t.Errorf("replay of r%d = %+v, first %+v", i, d, w)
			}
		}
		r, err := s.GetResult(context.Background(), "m", "u")
		if err != nil || r.Code != "queued" || r.ReservationID != wins[len(wins)-1].ReservationID || len(r.Reservations) != rounds {
			t.Errorf("u's result = %+v, %v", r, err)
		}
		checkBuyers(t, s, "v")
	}

	t.Run("memory", func(t *testing.T) {
		clock := newFakeClock()
		s := newMemory(t, clock)
		mustDefine(t, s, openAt(clock.Now(), "m", 2, 1))
		replays(t, s, run(t, s))
	})
	t.Run("local", func(t *testing.T) {
		clock := newFakeClock()
		dir := t.TempDir()
		s := openLocal(t, dir, clock)
		mustDefine(t, s, openAt(clock.Now(), "m", 2, 1))
		wins := run(t, s)
		s = reopenSame(t, s, dir, clock)
		replays(t, s, wins)
	})
}

// checkBuyers fails t unless exactly users hold items in activity m.
func checkBuyers(t *testing.T, s Store, users ...string) {
	t.Helper()
	ctx := context.Background()
	snap, err := s.Activity(ctx, "m")
	if err != nil || snap.Buyers != int64(len(users)) {
		t.Fatalf("snapshot = %+v, %v; want %d buyers", snap, err, len(users))
	}
	got, err := s.Holders(ctx, "m")
	slices.Sort(got)
	if err != nil || !slices.Equal(got, users) {
		t.Fatalf("holders = %v, %v; want %v", got, err, users)
	}
}
