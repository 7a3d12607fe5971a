package localstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// TestWinLogRoundTrip packs wins with awkward fields (empty, NUL, invalid UTF-8, the largest
// lengths, negative and huge numbers) and reads them back as they were; a row cut anywhere, or
// with bytes after its wins, is refused.
func TestWinLogRoundTrip(t *testing.T) {
	wins := []packedWin{
		{act: "a", idx: 0, entry: memEntry{id: "1800000000000-0", user: "u1", qty: 1, requestID: "r1", atMS: 1800000000000}, remaining: 9},
		{act: "b.x_Y-9", idx: 1 << 40, entry: memEntry{id: "1-18446744073709551615", user: "\x00\xff\xfe\"quoted\" 用户", qty: 1 << 62, requestID: "", atMS: -5}, remaining: -1},
		{act: strings.Repeat("a", admission.MaxActivityIDLen), idx: 7, entry: memEntry{id: "", user: strings.Repeat("u", admission.MaxUserIDLen), qty: 3, requestID: strings.Repeat("r", admission.MaxRequestIDLen), atMS: 0}, remaining: 1 << 62},
	}
	var data []byte
	for i := range wins {
		data = appendWin(data, wins[i].act, wins[i].idx, &wins[i].entry, wins[i].remaining)
	}
	var got []packedWin
	if err := decodeWins(data, len(wins), func(w *packedWin) error { got = append(got, *w); return nil }); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, wins) {
		t.Fatalf("decoded %+v\nwant %+v", got, wins)
	}
	for cut := range len(data) {
		if err := decodeWins(data[:cut], len(wins), func(*packedWin) error { return nil }); !errors.Is(err, errWinLog) {
			t.Fatalf("a row cut at %d of %d bytes: %v, want errWinLog", cut, len(data), err)
		}
	}
	if err := decodeWins(append(data, 0), len(wins), func(*packedWin) error { return nil }); !errors.Is(err, errWinLog) {
		t.Fatalf("a row with a byte after its wins: %v, want errWinLog", err)
	}
	if err := decodeWins(data, len(wins)+1, func(*packedWin) error { return nil }); !errors.Is(err, errWinLog) {
		t.Fatalf("a row holding fewer wins than its count: %v, want errWinLog", err)
	}
}

// TestLocalWinOutOfOrder: a win that is not its activity's next (a bug in the journal's order)
// is an error, which rolls the commit back, as a duplicate key did in schema version 1; another
// activity's count does not matter.
func TestLocalWinOutOfOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		idxs []int
	}{
		{"duplicate", []int{0, 1, 1}},
		{"gap", []int{0, 2}},
		{"alone", []int{1}},
	} {
		w := &localWriter{next: map[string]int{"b": 5}}
		wins := make([]memChange, len(tc.idxs))
		for i, idx := range tc.idxs {
			wins[i] = memChange{kind: changeWin, act: "a", idx: idx}
		}
		var err error
		for i := range wins {
			if _, err = w.packWin(&wins[i]); err != nil {
				break
			}
		}
		if err == nil {
			t.Errorf("%s: packWin accepted wins %v", tc.name, tc.idxs)
		}
	}
}

// TestLocalReopenAfterManyWins has 64 callers win in three activities, each releasing one of its
// wins halfway, so that batches hold runs of wins of many lengths between releases; the store
// opened again holds the same state.
func TestLocalReopenAfterManyWins(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	s := openLocal(t, dir, clock)
	acts := []string{"a0", "a1", "a2"}
	for _, id := range acts {
		mustDefine(t, s, openAt(clock.Now(), id, 1<<20, 1))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	winFrom64(t, s, acts, 40, func(act string, i int, d admission.Decision) error {
		if i != 20 {
			return nil
		}
		if ok, err := s.Release(ctx, act, d.ReservationID); err != nil || !ok {
			return fmt.Errorf("release %s: %v, %w", d.ReservationID, ok, err)
		}
		return nil
	})
	t.Logf("%d commits for 64 × 41 changes", s.cur.Load().w.commits.Load())
	reopenSame(t, s, dir, clock)
}

// winFrom64 has 64 callers each win buys times, caller g's i-th buy in acts[(g+i)%len(acts)] as a
// new user, and calls then (if set) after each win; the first error fails the test.
func winFrom64(t *testing.T, s admission.Store, acts []string, buys int, then func(act string, i int, d admission.Decision) error) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range buys {
				act := acts[(g+i)%len(acts)]
				d, err := s.Admit(ctx, admission.Request{Activity: act, User: fmt.Sprintf("u%d-%d", g, i), Qty: 1, RequestID: "r"})
				if err == nil && d.Outcome != admission.Won {
					err = fmt.Errorf("outcome %v", d.Outcome)
				}
				if err == nil && then != nil {
					err = then(act, i, d)
				}
				if err != nil {
					errs <- fmt.Errorf("caller %d, buy %d: %w", g, i, err)
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

// TestLocalDeleteWins deletes an activity whose wins share win_log rows with two others' (64
// callers winning in all three): the store opened again holds the other two as they were and not
// a win of the deleted one, which, defined again, starts from its first win.
func TestLocalDeleteWins(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	s := openLocal(t, dir, clock)
	acts := []string{"a0", "a1", "a2"}
	for _, id := range acts {
		mustDefine(t, s, openAt(clock.Now(), id, 1<<20, 1))
	}
	ctx := context.Background()
	winFrom64(t, s, acts, 30, nil)
	var rows, shared int
	err := eachRow(s.cur.Load().w.db, `SELECT n, data FROM win_log`, func(r *sql.Rows) error {
		var n int
		var data []byte
		if err := r.Scan(&n, &data); err != nil {
			return err
		}
		seen := map[string]bool{}
		rows++
		err := decodeWins(data, n, func(w *packedWin) error { seen[w.act] = true; return nil })
		if seen["a1"] && len(seen) > 1 {
			shared++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if shared == 0 {
		t.Fatalf("no win_log row of %d holds a1's wins beside another's: the test does not test the rewrite", rows)
	}
	if err := s.Delete(ctx, "a1", true); err != nil {
		t.Fatal(err)
	}
	mustDefine(t, s, openAt(clock.Now(), "a1", 5, 1))
	mustAdmit(t, s, "a1", "again", 1, "r")
	s = reopenSame(t, s, dir, clock)
	if n, err := s.Remaining(ctx, "a1"); err != nil || n != 4 {
		t.Fatalf("a1 defined again: remaining %d, %v; want 4", n, err)
	}
	t.Logf("%d win_log rows, %d of them shared by a1 and another activity", rows, shared)
}

// TestLocalWinLogDamaged cuts a committed win_log row short behind the store's back (a damage
// SQLite cannot see): the next open refuses the folder, naming the row, and changes nothing.
func TestLocalWinLogDamaged(t *testing.T) {
	dir := t.TempDir()
	s := openLocal(t, dir, nil)
	mustDefine(t, s, openAt(time.Now(), "a", 10, 1))
	mustAdmit(t, s, "a", "u1", 1, "r")
	mustAdmit(t, s, "a", "u2", 1, "r")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", filepath.Join(dir, localDBName))
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.Exec(`UPDATE win_log SET data = substr(data, 1, length(data) - 3) WHERE seq = (SELECT MAX(seq) FROM win_log)`)
	if err = errors.Join(err, db.Close()); err != nil {
		t.Fatal(err)
	}
	_, err = Open(dir, Options{})
	if !errors.Is(err, errWinLog) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("open with a damaged win_log row = %v, want errWinLog naming the folder", err)
	}
	t.Logf("open: %v", err)
}

// TestLocalCommitPaths commits a batch of wins alone (one INSERT in autocommit, commitWins), one
// with more wins than one row takes and one with a release among its wins (both in a transaction,
// the first of several rows): every win reads back once, in the order recorded, and the release
// is there.
func TestLocalCommitPaths(t *testing.T) {
	dir := t.TempDir()
	db, err := openLocalDB(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	w, err := newLocalWriter(db, dir, map[string]int{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	w.start(nil, 1, 0) // no ring: commitWins writes a batch of wins alone
	defer func() {
		if err := w.close(); err != nil {
			t.Error(err)
		}
	}()
	next := map[string]int{}
	wins := func(act string, n int) []memChange {
		cs := make([]memChange, n)
		for i := range cs {
			idx := next[act]
			next[act]++
			cs[i] = memChange{kind: changeWin, act: act, idx: idx, remaining: int64(1000 - idx), entry: memEntry{
				id: fmt.Sprintf("%d-0", 1800000000000+idx), user: fmt.Sprintf("%s-%03d-%s", act, idx, strings.Repeat("u", 240)),
				qty: 1, requestID: strings.Repeat("r", admission.MaxRequestIDLen), atMS: 1800000000000,
			}}
		}
		return cs
	}
	long := wins("b", 3*localOneRowWins)
	mixed := append(wins("c", 2), memChange{kind: changeRelease, act: "c", entry: memEntry{id: "1800000000000-0"}})
	batches := []struct {
		name    string
		changes []memChange
		oneRow  bool
	}{
		{"wins alone", wins("a", 5), true},
		{"as many wins as one row takes", wins("a", localOneRowWins), true},
		{"more wins than one row takes", long, false},
		{"wins and a release", mixed, false},
	}
	var want []string
	for _, b := range batches {
		if got := oneRowOfWins(b.changes); got != b.oneRow {
			t.Fatalf("%s: oneRowOfWins = %v, want %v", b.name, got, b.oneRow)
		}
		w.recordAll(b.changes) // one call: one batch
		if err := w.wait(context.Background()); err != nil {
			t.Fatalf("%s: %v", b.name, err)
		}
		for _, c := range b.changes {
			if c.kind == changeWin {
				want = append(want, fmt.Sprintf("%s/%d/%s", c.act, c.idx, c.entry.user))
			}
		}
	}
	var got []string
	rows := 0
	err = eachRow(db, `SELECT n, data FROM win_log ORDER BY seq`, func(r *sql.Rows) error {
		var n int
		var data []byte
		if err := r.Scan(&n, &data); err != nil {
			return err
		}
		rows++
		return decodeWins(data, n, func(pw *packedWin) error {
			got = append(got, fmt.Sprintf("%s/%d/%s", pw.act, pw.idx, pw.entry.user))
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("win_log holds %d wins, want the %d recorded, in order", len(got), len(want))
	}
	if rows < 5 {
		t.Errorf("win_log has %d rows, want at least 5 (the long batch in several)", rows)
	}
	var released int
	if err := db.QueryRow(`SELECT COUNT(*) FROM released WHERE activity = 'c'`).Scan(&released); err != nil || released != 1 {
		t.Errorf("released rows of c: %d, %v; want 1", released, err)
	}
}

// TestLocalWinPacksSmall: a win with every field at its longest packs into no more bytes than
// localMaxWinBytes, so that a row commitWins writes stays within localWinLogMax.
func TestLocalWinPacksSmall(t *testing.T) {
	e := memEntry{id: "18446744073709551615-18446744073709551615", user: strings.Repeat("u", admission.MaxUserIDLen),
		qty: -1 << 63, requestID: strings.Repeat("r", admission.MaxRequestIDLen), atMS: -1 << 63}
	if n := len(appendWin(nil, strings.Repeat("a", admission.MaxActivityIDLen), 1<<62, &e, -1<<63)); n > localMaxWinBytes {
		t.Fatalf("the longest win packs into %d bytes, more than localMaxWinBytes (%d)", n, localMaxWinBytes)
	}
	if localOneRowWins*localMaxWinBytes > localWinLogMax {
		t.Fatalf("%d wins of %d bytes exceed a row's %d", localOneRowWins, localMaxWinBytes, localWinLogMax)
	}
}
