package localstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// A user who wins, releases and wins again, more often than a memUser keeps answers in its slice
// (memUserAnswers), keeps the first answer to every request id, counts as a buyer only while
// holding an item, and a local store's load rebuilds all of it.
func TestMemoryManyWinsOneUser(t *testing.T) {
	const rounds = 3*memUserAnswers + 1
	run := func(t *testing.T, s admission.Store) []admission.Decision {
		ctx := context.Background()
		mustAdmit(t, s, "m", "v", 1, "v1") // v holds throughout
		var wins []admission.Decision
		for i := range rounds {
			d := mustAdmit(t, s, "m", "u", 1, "r"+strconv.Itoa(i))
			if d.Outcome != admission.Won {
				t.Fatalf("round %d: %+v", i, d)
			}
			wins = append(wins, d)
			checkBuyers(t, s, "u", "v")
			if d := mustAdmit(t, s, "m", "u", 1, "extra"); d.Outcome != admission.LimitReached {
				t.Fatalf("round %d: second item = %+v", i, d)
			}
			if ok, err := s.Release(ctx, "m", d.ReservationID); !ok || err != nil {
				t.Fatalf("round %d: release = %v, %v", i, ok, err)
			}
			checkBuyers(t, s, "v")
		}
		return wins
	}
	replays := func(t *testing.T, s admission.Store, wins []admission.Decision) {
		for i, w := range wins {
			d := mustAdmit(t, s, "m", "u", 1, "r"+strconv.Itoa(i))
			if !d.Replayed || d.Outcome != admission.Won || d.ReservationID != w.ReservationID || d.Remaining != w.Remaining {
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
func checkBuyers(t *testing.T, s admission.Store, users ...string) {
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

// TestMemoryEntryIndex: a win is found by its reservation id through the binary search over the
// entries (no map from id to index), also after the clock stepped back (ids still grow) and across
// many wins in one millisecond, in the memory store and in a local store reopened from disk; an id
// that is not a win's exact spelling is not found.
func TestMemoryEntryIndex(t *testing.T) {
	clock := newFakeClock()
	dir := t.TempDir()
	ls := openLocal(t, dir, clock)
	mustDefine(t, ls, openAt(clock.Now(), "a", 1000, 1))
	var ids []string
	for i := range 300 {
		switch {
		case i%50 == 49:
			clock.Add(-3 * time.Millisecond) // the clock steps back: ids must still grow
		case i%7 == 0:
			clock.Add(time.Millisecond)
		}
		ids = append(ids, mustAdmit(t, ls, "a", fmt.Sprintf("u%d", i), 1, "r").ReservationID)
	}
	check := func(name string, s *Memory) {
		t.Helper()
		a, err := s.lock("a")
		if err != nil {
			t.Fatal(err)
		}
		defer a.mu.Unlock()
		for want, id := range ids {
			if got, ok := a.entryIndex(id); !ok || got != want {
				t.Errorf("%s: entryIndex(%q) = %d, %v; want %d", name, id, got, ok, want)
			}
		}
		ms, seq, _ := parseEntryID(ids[10])
		for _, id := range []string{"", "x", "5", "1-2-3", "-1", fmt.Sprintf("%d-0%d", ms, seq), fmt.Sprintf("+%d-%d", ms, seq),
			fmt.Sprintf("%d-%d", ms, seq+1000), fmt.Sprintf("%d-%d", ms-1_000_000, seq), fmt.Sprintf("%d-0", ms+1_000_000)} {
			if i, ok := a.entryIndex(id); ok && a.entries.id(i) != id {
				t.Errorf("%s: entryIndex(%q) found entry %d, %q", name, id, i, a.entries.id(i))
			} else if ok {
				t.Errorf("%s: entryIndex(%q) found entry %d; no win has that id", name, id, i)
			}
		}
	}
	check("memory", ls.cur.Load().mem)
	// A release finds its win by id, and a release of an id no win has is ErrNotFound.
	if ok, err := ls.Release(context.Background(), "a", ids[123]); err != nil || !ok {
		t.Fatalf("release %s = %v, %v", ids[123], ok, err)
	}
	if _, err := ls.Release(context.Background(), "a", ids[123]+"0"); !errors.Is(err, admission.ErrNotFound) {
		t.Errorf("release of an unknown id: %v, want ErrNotFound", err)
	}
	if err := ls.Close(); err != nil {
		t.Fatal(err)
	}
	reopened := openLocal(t, dir, clock)
	defer reopened.Close()
	check("reopened", reopened.cur.Load().mem)
	if n := mustRemaining(t, reopened, "a"); n != 1000-300+1 {
		t.Errorf("remaining after the reopen = %d, want %d (one release)", n, 1000-300+1)
	}
}

// Users whose ids hash alike are chained and told apart by their ids: with a hash that gives
// three values, every lookup finds its own user among thousands, and an unknown id finds none.
func TestUserTableCollisions(t *testing.T) {
	tab := newUserTable()
	tab.hash = func(_ maphash.Seed, s string) uint64 { return uint64(len(s) % 3) }
	const n = 3*blockLen + 7 // more than one block
	for i := range n {
		name := "u" + strconv.Itoa(i)
		u, h := tab.find(name)
		if u != nil {
			t.Fatalf("%s found before it was added", name)
		}
		tab.add(name, h).held = int64(i)
	}
	for i := range n {
		name := "u" + strconv.Itoa(i)
		u, _ := tab.find(name)
		if u == nil || u.held != int64(i) || tab.names.string(u.name) != name {
			t.Fatalf("find(%s) = %+v", name, u)
		}
	}
	if u, _ := tab.find("nobody"); u != nil {
		t.Errorf("find(nobody) = %+v", u)
	}
	seen := 0
	tab.each(func(name string, u *memUser) {
		if name != "u"+strconv.Itoa(int(u.held)) {
			t.Errorf("each: %s holds %d", name, u.held)
		}
		seen++
	})
	if seen != n {
		t.Errorf("each saw %d users, want %d", seen, n)
	}
}

// A new user's win hashes the user id once: the lookup's hash is the insert's.
func TestMemoryWinHashesOnce(t *testing.T) {
	clock := newFakeClock()
	s := newMemory(t, clock)
	mustDefine(t, s, openAt(clock.Now(), "a", 1000, 1))
	a, err := s.lock("a")
	if err != nil {
		t.Fatal(err)
	}
	hashes := 0
	a.users.hash = func(seed maphash.Seed, id string) uint64 {
		hashes++
		return maphash.String(seed, id)
	}
	a.mu.Unlock()
	const n = 100
	for i := range n {
		if d := mustAdmit(t, s, "a", "u"+strconv.Itoa(i), 1, "r"); d.Outcome != admission.Won {
			t.Fatalf("admit = %+v", d)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if hashes != n {
		t.Errorf("%d new users' wins hashed %d times; want once each", n, hashes)
	}
}
