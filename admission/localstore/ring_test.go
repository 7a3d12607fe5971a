package localstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// ringSamples is one change of every kind, each field set that its kind commits.
func ringSamples() []memChange {
	at := time.UnixMilli(1_800_000_000_123)
	return []memChange{
		{kind: changeDefine, act: "a", def: admission.Activity{ID: "a", Stock: 100, Limit: 2, Start: at, End: at.Add(time.Hour), PayWithin: 15 * time.Minute, Salt: "s4lt"}},
		{kind: changeWin, act: "a", idx: 7, remaining: 92, entry: memEntry{id: "1800000000123-4", user: "u", qty: 1, requestID: "r", atMS: 1_800_000_000_123}},
		{kind: changeRelease, act: "a", entry: memEntry{id: "1800000000123-4"}},
		{kind: changeResult, act: "a", user: "u", idx: 8, result: admission.Result{Code: "paid", ReservationID: "1800000000123-4", OrderID: "o1", PayBeforeMS: 42,
			Reservations: []admission.Result{{Code: "cancelled", ReservationID: "1-0"}, {Code: "paid", ReservationID: "1800000000123-4", OrderID: "o1"}}}},
		{kind: changeResult, act: "a", user: "v", idx: 3, result: admission.Result{Code: "failed"}},
		{kind: changeGroup, act: "a", group: "orders"},
		{kind: changePending, act: "a", group: "orders", idx: 7, pend: memPending{consumer: "c1", deliveries: 3, at: time.Unix(0, 1_800_000_000_123_456_789)}},
		{kind: changeNext, act: "a", group: "orders", idx: 8},
		{kind: changeAck, act: "a", group: "orders", idx: 7},
		{kind: changeDead, act: "a", group: "orders", idx: 6, pend: memPending{deliveries: 5}, reason: "no stock in the warehouse"},
		{kind: changeTerms, act: "a", interval: 5, at: 120_000},
		{kind: changeJoin, act: "a", user: "u", early: true, at: 0.25},
		{kind: changeDraw, act: "a"},
		{kind: changeJoin, act: "a", user: "v", at: 10, interval: 5},
		{kind: changeDelete, act: "a"},
	}
}

// TestRingChangeRoundTrip: every kind of change reads back from its packing as the writer would
// commit it.
func TestRingChangeRoundTrip(t *testing.T) {
	for _, c := range ringSamples() {
		b, err := appendChange(nil, &c)
		if err != nil {
			t.Fatalf("kind %d: %v", c.kind, err)
		}
		got, err := decodeChange(c.kind, b)
		if err != nil {
			t.Fatalf("kind %d: %v", c.kind, err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Errorf("kind %d read back as\n%+v\nwant\n%+v", c.kind, got, c)
		}
		if _, err := decodeChange(c.kind, b[:len(b)-1]); !errors.Is(err, errRingChange) {
			t.Errorf("kind %d cut short by a byte: %v, want errRingChange", c.kind, err)
		}
		if _, err := decodeChange(c.kind, append(b, 0)); !errors.Is(err, errRingChange) {
			t.Errorf("kind %d with a byte more: %v, want errRingChange", c.kind, err)
		}
	}
	if _, err := decodeChange(99, nil); !errors.Is(err, errRingChange) {
		t.Errorf("unknown kind: %v, want errRingChange", err)
	}
}

// putOps writes operations of the given sizes into r from change from+1 on, in epoch.
func putOps(t *testing.T, r *localRing, from, epoch uint64, sizes ...int) uint64 {
	t.Helper()
	seq := from
	for _, n := range sizes {
		for i := range n {
			seq++
			c := memChange{kind: changeAck, act: "a", group: "g", idx: int(seq)}
			b, _ := appendChange(nil, &c)
			if !r.put(seq, epoch, c.kind, i == n-1, b) {
				t.Fatalf("put %d failed", seq)
			}
		}
	}
	return seq
}

// seqsOf numbers the changes changesAfter(from) returned, checking that each is the one putOps
// wrote under its number.
func seqsOf(from uint64, cs []memChange) []uint64 {
	var out []uint64
	for i, c := range cs {
		seq := from + 1 + uint64(i)
		if c.idx != int(seq) {
			panic(fmt.Sprintf("change %d holds %d", seq, c.idx))
		}
		out = append(out, seq)
	}
	return out
}

// TestRingChangesAfter: what an open replays is the run of matching slots after the last commit,
// up to the first torn, stale or foreign slot, without an operation cut short.
func TestRingChangesAfter(t *testing.T) {
	dir := t.TempDir()
	r, err := openLocalRing(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	got := func(from, epoch uint64) []uint64 {
		t.Helper()
		cs, err := r.changesAfter(from, epoch)
		if err != nil {
			t.Fatal(err)
		}
		return seqsOf(from, cs)
	}
	if s := got(0, 1); len(s) != 0 {
		t.Fatalf("a new ring replays %v", s)
	}
	last := putOps(t, r, 100, 3, 1, 2, 1) // changes 101, 102-103, 104
	if s := got(100, 3); !reflect.DeepEqual(s, []uint64{101, 102, 103, 104}) {
		t.Fatalf("replay after 100 = %v", s)
	}
	if s := got(102, 3); !reflect.DeepEqual(s, []uint64{103, 104}) {
		t.Fatalf("replay after 102 = %v", s) // 103 ends its operation: the slot says so
	}
	if s := got(100, 2); len(s) != 0 {
		t.Fatalf("another epoch's slots replayed: %v", s)
	}
	if s := got(90, 3); len(s) != 0 {
		t.Fatalf("a gap before the slots (change 91 never written) replayed %v", s)
	}
	// An operation whose last change never came: the kill came in the middle of it.
	putOps(t, r, last, 3, 1)
	seq := last + 2
	c := memChange{kind: changeAck, act: "a", group: "g", idx: int(seq)}
	b, _ := appendChange(nil, &c)
	r.put(seq, 3, c.kind, false, b)
	if s := got(100, 3); !reflect.DeepEqual(s, []uint64{101, 102, 103, 104, 105}) {
		t.Fatalf("replay with a half operation at the end = %v", s)
	}
	// A torn slot: a byte of its payload changed after the checksum.
	r.slot(103)[localRingSlotHdr] ^= 0xff
	if s := got(100, 3); !reflect.DeepEqual(s, []uint64{101}) {
		t.Fatalf("replay with 103 torn = %v, want 101 only (102's operation is cut)", s)
	}
	r.slot(103)[localRingSlotHdr] ^= 0xff
	// A slot whose checksum matches but whose payload is not a change: damage, not a torn tail.
	junk := []byte{0xff, 0xff, 0xff}
	r.put(104, 3, changeAck, true, junk)
	if _, err := r.changesAfter(100, 3); !errors.Is(err, errRingChange) {
		t.Fatalf("undecodable change: %v, want errRingChange", err)
	}
	// Too long for a slot: not written.
	if r.put(200, 3, changeAck, true, make([]byte, localRingPayload+1)) {
		t.Fatal("a payload longer than a slot was put")
	}
}

// TestLocalRingForeignFile: a ring file of the wrong size or header is refused, and left alone.
func TestLocalRingForeignFile(t *testing.T) {
	for name, content := range map[string][]byte{
		"short":      []byte("not a ring"),
		"bad header": make([]byte, localRingSize),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			s := openLocal(t, dir, nil)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, localRingName)
			if err := os.WriteFile(path, content, 0o640); err != nil {
				t.Fatal(err)
			}
			_, err := Open(dir, Options{})
			if err == nil || !strings.Contains(err.Error(), localRingName) {
				t.Fatalf("open with a foreign ring = %v, want an error naming the ring", err)
			}
			if fi, err := os.Stat(path); err != nil || fi.Size() != int64(len(content)) {
				t.Fatalf("the foreign ring was touched: %v %v", fi, err)
			}
			t.Log(err)
		})
	}
}

// TestLocalRingStalledCommit holds the database's only connection, so that no commit can land:
// callers are answered from the ring without waiting, until its slots all hold changes not yet
// committed; the next caller then waits for a commit, and its context ends the wait. Once the
// commits land, everything answered is in the database.
func TestLocalRingStalledCommit(t *testing.T) {
	dir := t.TempDir()
	s := openLocal(t, dir, nil)
	mustDefine(t, s, openAt(time.Now(), "a", 1<<40, 1))
	if d := mustAdmit(t, s, "a", "before", 1, "r"); d.Outcome != admission.Won {
		t.Fatalf("admit = %+v", d)
	}
	bg := context.Background()
	time.Sleep(20 * time.Millisecond) // let the writer commit what came before
	conn, err := s.cur.Load().w.db.Conn(bg)
	if err != nil {
		t.Fatal(err)
	}
	answered := 0
	for {
		ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
		d, err := s.Admit(ctx, admission.Request{Activity: "a", User: "u" + strconv.Itoa(answered), Qty: 1, RequestID: "r"})
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			break
		}
		if err != nil || d.Outcome != admission.Won {
			t.Fatalf("admit %d with the commits stalled = %+v, %v", answered, d, err)
		}
		answered++
		if answered > localRingSlots {
			t.Fatalf("%d answers with no commit: more than the ring holds", answered)
		}
	}
	if answered < localRingSlots-10 {
		t.Fatalf("%d answers from the ring before a caller waited, want about %d", answered, localRingSlots)
	}
	if st := s.Stats(); st.Unringed == 0 {
		t.Errorf("stats %+v: want the waiting caller's change counted as not in the ring", st)
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	if d := mustAdmit(t, s, "a", "after", 1, "r"); d.Outcome != admission.Won {
		t.Fatalf("admit after the stall = %+v", d)
	}
	s = reopenClean(t, s, dir)
	defer s.Close()
	for i := range answered {
		if d := mustAdmit(t, s, "a", "u"+strconv.Itoa(i), 1, "r"); d.Outcome != admission.Won || !d.Replayed {
			t.Fatalf("answered win %d after reopen = %+v", i, d)
		}
	}
}

// TestLocalRingStaleAfterDatabaseReset removes the database and keeps the ring: the new database's
// openings must not take the old ring's slots for their own. With epochs counted from 1 they did,
// and the second open of the new sale replayed the old sale's wins into it (found in review).
func TestLocalRingStaleAfterDatabaseReset(t *testing.T) {
	dir := t.TempDir()
	s := openLocal(t, dir, nil)
	mustDefine(t, s, openAt(time.Now(), "a", 100, 1))
	for i := range 5 {
		mustAdmit(t, s, "a", "old"+strconv.Itoa(i), 1, "r")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(filepath.Join(dir, localDBName+suffix)); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	s = openLocal(t, dir, nil)
	mustDefine(t, s, openAt(time.Now(), "a", 100, 1))
	for range 2 {
		s = reopenClean(t, s, dir)
	}
	defer s.Close()
	if n := mustRemaining(t, s, "a"); n != 100 {
		t.Errorf("remaining %d in the new sale, want 100: the old ring's wins were replayed into it", n)
	}
}

// TestLocalRingHighWater holds the writer's schedule at an hour: the ring's answers do not wait for
// it, and a commit comes only when a quarter of the slots holds changes not yet committed, long
// before the ring runs out and callers would have to wait.
func TestLocalRingHighWater(t *testing.T) {
	s, err := Open(t.TempDir(), Options{commitEvery: time.Hour, checkpointEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustDefine(t, s, openAt(time.Now(), "a", 1<<40, 1)) // a define waits for its commit
	before := s.Stats().Commits
	base := s.cur.Load().w.enq.Load()
	for i := 0; s.Stats().Commits == before; i++ {
		pending := s.cur.Load().w.enq.Load() - base
		if pending > localRingSlots/2 {
			t.Fatalf("%d changes pending and no commit: the high-water mark (%d) did not wake the writer", pending, localRingSlots/4)
		}
		if d := mustAdmit(t, s, "a", "u"+strconv.Itoa(i), 1, "r"); d.Outcome != admission.Won {
			t.Fatalf("admit %d = %+v", i, d)
		}
		if pending+1 < localRingSlots/4 && s.Stats().Commits != before {
			t.Fatalf("a commit after %d changes, before the high-water mark and an hour early", pending+1)
		}
	}
	if st := s.Stats(); st.Unringed != 0 {
		t.Errorf("stats %+v: every answer should have come from the ring", st)
	}
}

// helperRingStall holds the database's connection, so that nothing is committed, and admits,
// releases and records results from several goroutines, every answer from the ring; it prints
// them (W user reservation, R reservation, S user) and DONE, then waits to be killed.
func helperRingStall(dir string) error {
	s, err := Open(dir, Options{})
	if err != nil {
		return err
	}
	ctx := context.Background()
	if _, err := s.Define(ctx, openAt(time.Now(), "a", 1_000, 1), false); err != nil {
		return err
	}
	time.Sleep(20 * time.Millisecond) // the definition's commit
	conn, err := s.cur.Load().w.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		fmt.Printf(format+"\n", args...)
		outMu.Unlock()
	}
	var wg sync.WaitGroup
	var failed error
	var failMu sync.Mutex
	for g := range 8 {
		wg.Go(func() {
			for i := range 60 {
				user := fmt.Sprintf("g%d-%d", g, i)
				d, err := s.Admit(ctx, admission.Request{Activity: "a", User: user, Qty: 1, RequestID: "r"})
				if err == nil && d.Outcome == admission.Won {
					say("W %s %s", user, d.ReservationID)
					switch i % 4 {
					case 1:
						var ok bool
						if ok, err = s.Release(ctx, "a", d.ReservationID); ok {
							say("R %s", d.ReservationID)
						}
					case 2:
						if err = s.SetResult(ctx, "a", user, admission.Result{Code: "paid", ReservationID: d.ReservationID, OrderID: "o-" + user}); err == nil {
							say("S %s", user)
						}
					}
				}
				if err != nil {
					failMu.Lock()
					failed = err
					failMu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if failed != nil {
		return failed
	}
	if st := s.Stats(); st.Commits > 1 || st.Unringed != 0 {
		return fmt.Errorf("stats %+v: want no commit after the definition's, every change in the ring", st)
	}
	say("DONE")
	select {}
}

// reopenClean closes s and opens dir again: a clean close leaves nothing to replay.
func reopenClean(t *testing.T, s *Store, dir string) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openLocal(t, dir, nil)
	if st := s.Stats(); st.Replayed != 0 {
		t.Errorf("the open after a clean close replayed %d changes", st.Replayed)
	}
	return s
}

// ringStallKilled runs helperRingStall on dir until it has said DONE, SIGKILLs it and returns
// what it said.
func ringStallKilled(t *testing.T, dir string) []string {
	t.Helper()
	p, lines := startHelper(t, "ringstall", dir)
	var said []string
	waitLine(t, lines, "DONE", &said)
	kill(t, p)
	return said
}

// TestLocalRingCrash SIGKILLs a child whose answers all came from the ring (its commits stalled):
// the database holds none of them, the reopened store has every one. Without the ring file the
// folder is refused, not opened without those answers; a second open replays nothing.
func TestLocalRingCrash(t *testing.T) {
	dir := t.TempDir()
	said := ringStallKilled(t, dir)
	wins, released, results := map[string]string{}, map[string]bool{}, map[string]bool{}
	for _, l := range said {
		f := strings.Fields(l)
		switch f[0] {
		case "W":
			wins[f[1]] = f[2]
		case "R":
			released[f[1]] = true
		case "S":
			results[f[1]] = true
		}
	}
	if len(wins) != 480 || len(released) == 0 || len(results) == 0 {
		t.Fatalf("the child said %d wins, %d releases, %d results", len(wins), len(released), len(results))
	}

	ring := filepath.Join(dir, localRingName)
	if err := os.Rename(ring, ring+".away"); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, Options{}); !errors.Is(err, errRingMissing) {
		t.Fatalf("open without the ring after a crash = %v, want errRingMissing", err)
	} else {
		t.Log(err)
	}
	if err := os.Rename(ring+".away", ring); err != nil {
		t.Fatal(err)
	}

	check := func(s *Store) {
		t.Helper()
		ctx := context.Background()
		for user, id := range wins {
			d, err := s.Admit(ctx, admission.Request{Activity: "a", User: user, Qty: 1, RequestID: "r"})
			if err != nil || !d.Replayed || d.ReservationID != id {
				t.Fatalf("answered win of %s after the kill = %+v, %v; want %s", user, d, err, id)
			}
		}
		for user := range results {
			r, err := s.GetResult(ctx, "a", user)
			if err != nil || r.Code != "paid" || r.OrderID != "o-"+user {
				t.Fatalf("result of %s after the kill = %+v, %v", user, r, err)
			}
		}
		if n := mustRemaining(t, s, "a"); n != 1_000-int64(len(wins))+int64(len(released)) {
			t.Fatalf("remaining %d after the kill, want %d", n, 1_000-len(wins)+len(released))
		}
	}
	s := openLocal(t, dir, nil)
	if st := s.Stats(); st.Replayed < uint64(len(wins)+len(released)+len(results)) {
		t.Errorf("stats %+v: want at least %d changes replayed", st, len(wins)+len(released)+len(results))
	} else {
		t.Logf("replayed %d changes", st.Replayed)
	}
	check(s)
	s = reopenClean(t, s, dir)
	defer s.Close()
	check(s)
}

// TestLocalRingFsyncAlways: with fsync always a store writes no ring (every answer waits for its
// synced commit), yet replays one an earlier opening left, and a folder closed cleanly opens
// without its ring.
func TestLocalRingFsyncAlways(t *testing.T) {
	dir := t.TempDir()
	ringStallKilled(t, dir)
	s, err := Open(dir, Options{FsyncAlways: true})
	if err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Replayed == 0 {
		t.Errorf("stats %+v: the ring was not replayed", st)
	}
	if n := mustRemaining(t, s, "a"); n == 1_000 {
		t.Error("nothing the child was answered for is in the store")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, localRingName)); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, Options{FsyncAlways: true})
	if err != nil {
		t.Fatalf("open a cleanly closed folder without its ring: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, localRingName)); !os.IsNotExist(err) {
		t.Errorf("fsync always made a ring: %v", err)
	}
	s = openLocal(t, dir, nil) // and without fsync always, a new ring
	defer s.Close()
	if _, err := os.Stat(filepath.Join(dir, localRingName)); err != nil {
		t.Errorf("no ring: %v", err)
	}
}

// TestLocalRingFault cuts the ring file short under the running store, so that the next write to
// its mapping faults (SIGBUS): the process lives on, the ring is given up, every later call waits
// for its commit and nothing answered is lost. The next open refuses the damaged ring, saying that
// after a clean close it is safe to remove, and without it the sale goes on.
func TestLocalRingFault(t *testing.T) {
	dir := t.TempDir()
	s := openLocal(t, dir, nil)
	mustDefine(t, s, openAt(time.Now(), "a", 100, 1))
	mustAdmit(t, s, "a", "before", 1, "r")
	ring := filepath.Join(dir, localRingName)
	if err := os.Truncate(ring, 0); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if d := mustAdmit(t, s, "a", "u"+strconv.Itoa(i), 1, "r"); d.Outcome != admission.Won {
			t.Fatalf("admit %d after the fault = %+v", i, d)
		}
	}
	if st := s.Stats(); st.Unringed < 5 || st.Commits == 0 {
		t.Fatalf("stats %+v: want the changes after the fault outside the ring, and committed", st)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := Open(dir, Options{})
	if err == nil || !strings.Contains(err.Error(), "removing "+localRingName+" is safe") {
		t.Fatalf("open with the cut ring after a clean close = %v, want the refusal with its remedy", err)
	}
	t.Log(err)
	if err := os.Remove(ring); err != nil {
		t.Fatal(err)
	}
	s = openLocal(t, dir, nil)
	defer s.Close()
	for _, u := range []string{"before", "u0", "u4"} {
		if d := mustAdmit(t, s, "a", u, 1, "r"); !d.Replayed {
			t.Fatalf("win of %s after the reopen = %+v, want its replay", u, d)
		}
	}
	if n := mustRemaining(t, s, "a"); n != 94 {
		t.Fatalf("remaining %d, want 94", n)
	}
}

// TestLocalRingCloseUnderLoad closes the store while buyers admit: every win answered before the
// close is in the database after it, so that the ring, which a clean close says may be removed,
// is removed here before the folder is opened again.
func TestLocalRingCloseUnderLoad(t *testing.T) {
	for round := range 10 {
		dir := t.TempDir()
		s := openLocal(t, dir, nil)
		mustDefine(t, s, openAt(time.Now(), "a", 1<<40, 1))
		var (
			mu  sync.Mutex
			won []string
			wg  sync.WaitGroup
		)
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					user := fmt.Sprintf("g%d-%d", g, i)
					d, err := s.Admit(context.Background(), admission.Request{Activity: "a", User: user, Qty: 1, RequestID: "r"})
					if err != nil {
						return // closed
					}
					if d.Outcome == admission.Won {
						mu.Lock()
						won = append(won, user)
						mu.Unlock()
					}
				}
			}()
		}
		time.Sleep(time.Duration(1+round%5) * time.Millisecond)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if err := os.Remove(filepath.Join(dir, localRingName)); err != nil {
			t.Fatal(err)
		}
		s = openLocal(t, dir, nil)
		for _, u := range won {
			if d := mustAdmit(t, s, "a", u, 1, "r"); d.Outcome != admission.Won || !d.Replayed {
				t.Fatalf("round %d: %s's answered win after the close = %+v", round, u, d)
			}
		}
		// A call whose change was committed as the store closed may have been answered with the
		// close's error instead (an unknown outcome, as a timeout is): one per buyer at most.
		if n, most := mustRemaining(t, s, "a"), int64(1<<40-len(won)); n > most || n < most-8 {
			t.Fatalf("round %d: remaining %d after the close, want %d or a few less: %d wins answered", round, n, most, len(won))
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
