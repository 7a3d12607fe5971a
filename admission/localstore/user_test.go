package localstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// A user who wins, releases and wins again, more often than a memUser keeps answers in its slice
// (memUserAnswers), keeps the first answer to every request id, counts as a buyer only while
// holding an item, lists only its held win's request id, and a local store's load rebuilds all of
// it.
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
			checkHeld(t, s, 2, "r"+strconv.Itoa(i), "v1")
			if d := mustAdmit(t, s, "m", "u", 1, "extra"); d.Outcome != admission.LimitReached {
				t.Fatalf("round %d: second item = %+v", i, d)
			}
			if ok, err := s.Release(ctx, "m", d.ReservationID); !ok || err != nil {
				t.Fatalf("round %d: release = %v, %v", i, ok, err)
			}
			checkHeld(t, s, 1, "v1")
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
		checkHeld(t, s, 1, "v1")
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

// checkHeld fails t unless activity m has buyers users holding items and its held wins' request
// ids are exactly reqs, sorted.
func checkHeld(t *testing.T, s admission.Store, buyers int64, reqs ...string) {
	t.Helper()
	ctx := context.Background()
	snap, err := s.Activity(ctx, "m")
	if err != nil || snap.Buyers != buyers {
		t.Fatalf("snapshot = %+v, %v; want %d buyers", snap, err, buyers)
	}
	got, err := s.HeldRequests(ctx, "m")
	slices.Sort(got)
	if err != nil || !slices.Equal(got, reqs) {
		t.Fatalf("held requests = %q, %v; want %q", got, err, reqs)
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

// extUsers returns the users of activity act that have a memUserExt, sorted.
func extUsers(t *testing.T, m *Memory, act string) []string {
	t.Helper()
	a, err := m.lock(act)
	if err != nil {
		t.Fatal(err)
	}
	defer a.mu.Unlock()
	var users []string
	a.users.each(func(name string, u *memUser) {
		if u.ext != 0 {
			users = append(users, strings.Clone(name))
		}
	})
	slices.Sort(users)
	return users
}

// A sale's usual winner, one win and the order backend's results for its reservation (pending
// payment with an order id, then paid), stays in its pointer-free memUser: after n such wins the
// table holds no memUserExt, in the memory store and in a local store's load, and every result
// and replay reads back as set.
func TestMemoryResultsStayPointerFree(t *testing.T) {
	const n = blockLen + 100 // more than one block
	ctx := context.Background()
	run := func(t *testing.T, s admission.Store) map[string]admission.Decision {
		wins := map[string]admission.Decision{}
		for i := range n {
			user := "u" + strconv.Itoa(i)
			d := mustAdmit(t, s, "a", user, 1, "req-"+user)
			if d.Outcome != admission.Won {
				t.Fatalf("admit %s = %+v", user, d)
			}
			wins[user] = d
			r := admission.Result{Code: "pending_payment", ReservationID: d.ReservationID, OrderID: "order-" + user, PayBeforeMS: int64(1000 + i)}
			if err := s.SetResult(ctx, "a", user, r); err != nil {
				t.Fatal(err)
			}
			if i%2 == 0 {
				r.Code = "paid"
				if err := s.SetResult(ctx, "a", user, r); err != nil {
					t.Fatal(err)
				}
			}
		}
		return wins
	}
	check := func(t *testing.T, s admission.Store, m *Memory, wins map[string]admission.Decision) {
		t.Helper()
		if x := extUsers(t, m, "a"); len(x) != 0 {
			t.Errorf("%d of %d users have a memUserExt; want none", len(x), n)
		}
		for i := range n {
			user := "u" + strconv.Itoa(i)
			want := admission.Result{Code: "pending_payment", ReservationID: wins[user].ReservationID, OrderID: "order-" + user, PayBeforeMS: int64(1000 + i)}
			if i%2 == 0 {
				want.Code = "paid"
			}
			if got, err := s.GetResult(ctx, "a", user); err != nil || !got.Equal(want) {
				t.Fatalf("result of %s = %+v, %v; want %+v", user, got, err, want)
			}
			if d := mustAdmit(t, s, "a", user, 1, "req-"+user); !d.Replayed || d.ReservationID != wins[user].ReservationID || d.Remaining != wins[user].Remaining {
				t.Fatalf("replay of %s = %+v; first %+v", user, d, wins[user])
			}
		}
	}
	t.Run("memory", func(t *testing.T) {
		clock := newFakeClock()
		s := newMemory(t, clock)
		mustDefine(t, s, openAt(clock.Now(), "a", 2*n, 1))
		check(t, s, s, run(t, s))
	})
	t.Run("local", func(t *testing.T) {
		clock := newFakeClock()
		dir := t.TempDir()
		s := openLocal(t, dir, clock)
		mustDefine(t, s, openAt(clock.Now(), "a", 2*n, 1))
		wins := run(t, s)
		s = reopenSame(t, s, dir, clock)
		check(t, s, s.cur.Load().mem, wins)
	})
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

// userModel is a user's records and answers as admission.FoldResult and the Redis store keep
// them, for TestMemoryRecordsMatchFold.
type userModel struct {
	top     admission.Result
	hasTop  bool
	list    []admission.Result
	resvs   []string // the user's reservation ids, oldest first
	answers map[string]admission.Decision
}

func (m *userModel) fold(r admission.Result, win bool) {
	m.top, m.list = admission.FoldResult(m.top, m.hasTop, m.list, r, win)
	m.hasTop = true
}

// Every way a user's records change (wins, releases and wins again, results for the user's
// reservation, another's, none; order ids set, changed and cleared, one too long for a memRecord;
// a result before any win, one naming the coming win's id) gives the records and answers
// admission.FoldResult gives, whether the user stays simple or gets a memUserExt, in the memory
// store, in a local store, and in that store's load. Steady users (one win, then results of its
// reservation with any code and time, and one order id) stay simple throughout.
func TestMemoryRecordsMatchFold(t *testing.T) {
	run := func(t *testing.T, s admission.Store, m *Memory, clock *fakeClock, reopen func() (admission.Store, *Memory)) {
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(1, 2))
		users := []string{"early", "s0", "s1", "s2"}
		for i := range 12 {
			users = append(users, "w"+strconv.Itoa(i))
		}
		steady := func(u string) bool { return strings.HasPrefix(u, "s") }
		model := map[string]*userModel{}
		for _, u := range users {
			model[u] = &userModel{answers: map[string]admission.Decision{}}
		}
		var allResvs []string
		buy := func(u, req string) admission.Decision {
			t.Helper()
			d := mustAdmit(t, s, "a", u, 1, req)
			if d.Outcome == admission.Won {
				mu := model[u]
				mu.fold(admission.Result{Code: "queued", ReservationID: d.ReservationID}, true)
				mu.resvs = append(mu.resvs, d.ReservationID)
				mu.answers[req] = d
				allResvs = append(allResvs, d.ReservationID)
			}
			return d
		}
		result := func(u string, r admission.Result) {
			t.Helper()
			if err := s.SetResult(ctx, "a", u, r); err != nil {
				t.Fatal(err)
			}
			model[u].fold(r, false)
		}
		long := strings.Repeat("o", memOrderIDMax+1)
		compare := func(step int, s admission.Store) {
			t.Helper()
			for _, u := range users {
				mu := model[u]
				got, err := s.GetResult(ctx, "a", u)
				if !mu.hasTop {
					if !errors.Is(err, admission.ErrNotFound) {
						t.Fatalf("step %d: result of %s = %+v, %v; want ErrNotFound", step, u, got, err)
					}
					continue
				}
				want := mu.top
				want.Reservations = mu.list
				if err != nil || !got.Equal(want) {
					t.Fatalf("step %d: result of %s = %+v, %v; want %+v", step, u, got, err, want)
				}
				for req, first := range mu.answers {
					d := mustAdmit(t, s, "a", u, 1, req)
					if !d.Replayed || d.ReservationID != first.ReservationID || d.Remaining != first.Remaining {
						t.Fatalf("step %d: replay of %s/%s = %+v; first %+v", step, u, req, d, first)
					}
				}
			}
		}

		// early's first result names the reservation its win is about to get.
		clock.Add(time.Millisecond)
		next := fmt.Sprintf("%d-0", clock.Now().UnixMilli())
		result("early", admission.Result{Code: "paid", ReservationID: next, OrderID: "o-early", PayBeforeMS: 9})
		if d := buy("early", "r-early"); d.Outcome != admission.Won || d.ReservationID != next {
			t.Fatalf("early's win = %+v; want reservation %s", d, next)
		}
		// w0's record, kept in place, is its first reservation's record once a second win
		// promotes it.
		d := buy("w0", "r-w0")
		result("w0", admission.Result{Code: "pending_payment", ReservationID: d.ReservationID, OrderID: "o-w0", PayBeforeMS: 5})
		buy("w0", "r2-w0")
		compare(-1, s)

		const steps = 3000
		for step := range steps {
			clock.Add(time.Millisecond)
			u := users[1+rng.IntN(len(users)-1)] // early keeps its state from above
			mu := model[u]
			switch op := rng.IntN(10); {
			case op < 3: // a buy
				if steady(u) && len(mu.resvs) > 0 {
					break
				}
				buy(u, "r"+strconv.Itoa(step))
			case op < 4: // a release of the user's latest reservation
				if len(mu.resvs) > 0 {
					if _, err := s.Release(ctx, "a", mu.resvs[len(mu.resvs)-1]); err != nil {
						t.Fatal(err)
					}
				}
			default: // the order backend's result
				codes := admission.ResultCodes()
				r := admission.Result{Code: codes[rng.IntN(len(codes))], PayBeforeMS: int64(rng.IntN(3))}
				switch k := rng.IntN(10); {
				case k < 6 && len(mu.resvs) > 0:
					r.ReservationID = mu.resvs[len(mu.resvs)-1]
				case k < 7 && len(mu.resvs) > 0:
					r.ReservationID = mu.resvs[rng.IntN(len(mu.resvs))]
				case k < 8 && len(allResvs) > 0:
					r.ReservationID = allResvs[rng.IntN(len(allResvs))]
				}
				r.OrderID = []string{"", "o-" + u, "o-" + u, "o-" + u, "o2-" + u, long}[rng.IntN(6)]
				if steady(u) {
					if len(mu.resvs) == 0 {
						break
					}
					r.ReservationID, r.OrderID = mu.resvs[0], "o-"+u
				}
				result(u, r)
			}
			compare(step, s)
			if reopen != nil && step%500 == 499 {
				s, m = reopen()
				compare(step, s)
			}
		}
		// Both kinds of users were met: the steady ones stayed simple, the others have a memUserExt.
		var want []string
		for _, u := range users {
			if !steady(u) {
				want = append(want, u)
			}
		}
		slices.Sort(want)
		if x := extUsers(t, m, "a"); !slices.Equal(x, want) {
			t.Errorf("users with a memUserExt: %v; want %v", x, want)
		}
	}
	// Stock for every buy, limit 2: users win again while they hold one, and after releases.
	def := func(clock *fakeClock) admission.Activity { return openAt(clock.Now(), "a", 1<<20, 2) }
	t.Run("memory", func(t *testing.T) {
		clock := newFakeClock()
		s := newMemory(t, clock)
		mustDefine(t, s, def(clock))
		run(t, s, s, clock, nil)
	})
	t.Run("local", func(t *testing.T) {
		clock := newFakeClock()
		dir := t.TempDir()
		s := openLocal(t, dir, clock)
		mustDefine(t, s, def(clock))
		run(t, s, s.cur.Load().mem, clock, func() (admission.Store, *Memory) {
			s = reopenSame(t, s, dir, clock)
			return s, s.cur.Load().mem
		})
	})
}
