package admission

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestLocalWinRuns checks how a run of n wins is cut into multi-row INSERTs: every win once, in
// order, with consecutive seqs, in statements of 2, 4, ... 64 rows and at most one single row.
func TestLocalWinRuns(t *testing.T) {
	for n := 1; n <= 200; n++ {
		w := &localWriter{seq: 7, next: map[string]int{}}
		wins := make([]memChange, n)
		for i := range wins {
			wins[i] = memChange{kind: changeWin, act: "a", idx: i, entry: memEntry{id: fmt.Sprint(i), user: "u", qty: 1, requestID: "r"}}
		}
		next, singles := 0, 0
		exec := func(st int, args ...any) error {
			rows := 1
			switch {
			case st == stmtWin:
				singles++
			case st >= stmtWins2 && st <= stmtWins64:
				rows = 2 << (st - stmtWins2)
			default:
				return fmt.Errorf("statement %d for a win", st)
			}
			if len(args) != rows*9 {
				return fmt.Errorf("statement of %d rows with %d arguments", rows, len(args))
			}
			for r := range rows {
				if got := args[r*9+2]; got != next {
					return fmt.Errorf("row %d is win %v, want %d", r, got, next)
				}
				if got := args[r*9]; got != int64(8+next) {
					return fmt.Errorf("row %d has seq %v, want %d", r, got, 8+next)
				}
				next++
			}
			return nil
		}
		if err := w.applyWins(exec, wins); err != nil {
			t.Fatalf("%d wins: %v", n, err)
		}
		if next != n || singles > 1 || w.seq != int64(7+n) {
			t.Fatalf("%d wins: %d written, %d alone, last seq %d", n, next, singles, w.seq)
		}
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
		exec := func(int, ...any) error { return nil }
		if err := w.applyWins(exec, wins); err == nil {
			t.Errorf("%s: applyWins accepted wins %v", tc.name, tc.idxs)
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
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				act := acts[(g+i)%len(acts)]
				d, err := s.Admit(ctx, Request{Activity: act, User: fmt.Sprintf("u%d-%d", g, i), Qty: 1, RequestID: "r"})
				if err == nil && d.Outcome != Won {
					err = fmt.Errorf("outcome %v", d.Outcome)
				}
				if err == nil && i == 20 {
					var ok bool
					if ok, err = s.Release(ctx, act, d.ReservationID); err == nil && !ok {
						err = fmt.Errorf("release %s: not released", d.ReservationID)
					}
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
	t.Logf("%d commits for 64 × 41 changes", s.w.commits.Load())
	want := dumpJSON(t, s.mem)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openLocal(t, dir, clock)
	defer s.Close()
	if got := dumpJSON(t, s.mem); got != want {
		t.Fatalf("state after reopen:\n%s\nbefore close:\n%s", got, want)
	}
}
