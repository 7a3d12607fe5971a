package localstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// failLocal makes the commits of s's opening fail once room more pages are written, as a full
// disk does: SQLite's page limit, which holds for the opening's one connection, so the folder
// opened again has room.
func failLocal(t *testing.T, s *Store, room int) {
	t.Helper()
	db := s.cur.Load().w.db
	var pages int
	if err := db.QueryRow(`PRAGMA page_count`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(fmt.Sprintf(`PRAGMA max_page_count = %d`, pages+room)); err != nil {
		t.Fatal(err)
	}
}

// statsNotDown fails the test when a counter of now is below the same counter of was.
func statsNotDown(t *testing.T, what string, was, now Stats) {
	t.Helper()
	if now.Commits < was.Commits || now.Changes < was.Changes || now.CommitTime < was.CommitTime ||
		now.Checkpoints < was.Checkpoints || now.CheckpointsFailed < was.CheckpointsFailed ||
		now.CheckpointTime < was.CheckpointTime || now.Replayed < was.Replayed || now.Unringed < was.Unringed {
		t.Errorf("%s: Stats went down: %+v, then %+v", what, was, now)
	}
}

// checkWins checks that every answered win replays with its reservation through st, and that "a"
// sold those and no more.
func checkWins(t *testing.T, st admission.Store, wins map[string]string) {
	t.Helper()
	ctx := context.Background()
	for user, id := range wins {
		d, err := st.Admit(ctx, admission.Request{Activity: "a", User: user, Qty: 1, RequestID: "r"})
		if err != nil || !d.Replayed || d.ReservationID != id {
			t.Fatalf("answered win of %s = %+v, %v; want the replay of %s", user[:10], d, err, id)
		}
	}
	snap, err := st.Activity(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	// Exactly: a buy answered ErrFailed took nothing, though its win may have reached the ring.
	if snap.Sold != int64(len(wins)) || snap.Sold != snap.Queued {
		t.Errorf("%+v; want exactly the %d wins answered", snap, len(wins))
	}
}

// TestLocalReopen: a store whose commit failed is opened again in place. The same Store, and a
// Guard that holds it, serve again; every answered win is there (the ring's replay included);
// Stats has not gone down; a subscription to the failed opening ended and a new one works; and
// a second Reopen, of a store that works, does nothing.
func TestLocalReopen(t *testing.T) {
	dir := t.TempDir()
	s := openLocal(t, dir, nil)
	defer s.Close()
	ctx := context.Background()
	if reopened, err := s.Reopen(); reopened || err != nil {
		t.Fatalf("Reopen of a store that works = %v, %v; want false, nil", reopened, err)
	}
	mustDefine(t, s, openAt(time.Now(), "a", 1<<40, 1))
	g := admission.NewGuard(s, admission.GuardOptions{})
	restocks, err := s.Restocks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	failLocal(t, s, 40)
	wins, _ := rushUntilFull(t, s)
	failed := s.Stats()
	if err := s.Failure(); !errors.Is(err, ErrFailed) {
		t.Fatalf("Failure() = %v, want ErrFailed", err)
	}
	if _, err := s.Remaining(ctx, "a"); !errors.Is(err, ErrFailed) || !strings.HasPrefix(err.Error(), "remaining a: ") {
		t.Errorf("remaining after the failure = %v, want \"remaining a: \" and ErrFailed", err)
	}

	reopened, err := s.Reopen()
	if !reopened || err != nil {
		t.Fatalf("Reopen of a failed store = %v, %v; want true, nil", reopened, err)
	}
	if err := s.Failure(); err != nil {
		t.Errorf("Failure() after Reopen = %v", err)
	}
	statsNotDown(t, "Reopen", failed, s.Stats())
	select {
	case _, open := <-restocks:
		if open {
			t.Error("a restock on the failed opening's subscription")
		}
	case <-time.After(5 * time.Second):
		t.Error("Reopen did not end the failed opening's subscription")
	}
	checkWins(t, g, wins)
	if d := mustAdmit(t, s, "a", "after", 1, "r"); d.Outcome != admission.Won {
		t.Errorf("admit after Reopen = %+v", d)
	}
	if reopened, err := s.Reopen(); reopened || err != nil {
		t.Errorf("second Reopen = %v, %v; want false, nil", reopened, err)
	}
	// The win is answered from the ring; its commit follows, counted on top of the failed
	// opening's commits.
	deadline := time.Now().Add(10 * time.Second)
	for s.Stats().Commits <= failed.Commits && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	statsNotDown(t, "a commit after Reopen", failed, s.Stats())
	if now := s.Stats(); now.Commits <= failed.Commits {
		t.Errorf("commits %d after Reopen and a win, %d before", now.Commits, failed.Commits)
	}
	t.Logf("%d wins answered before the failure; Stats %+v", len(wins), s.Stats())
}

// TestLocalReopenFails: a Reopen that cannot open the folder leaves nothing open: every call
// answers a store error with its context, Failure returns Reopen's error, Stats keeps the
// counters, and the next Reopen, once the folder can be opened, loads what was committed. Close
// then has nothing to close, and Reopen after Close is an error.
func TestLocalReopenFails(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "store")
	s := openLocal(t, dir, nil)
	ctx := context.Background()
	mustDefine(t, s, openAt(time.Now(), "a", 1<<40, 1))
	failLocal(t, s, 40)
	wins, _ := rushUntilFull(t, s)
	failed := s.Stats()

	// The folder cannot be opened: a file where it was.
	away := filepath.Join(base, "away")
	if err := os.Rename(dir, away); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	reopened, err := s.Reopen()
	if reopened || err == nil || !strings.Contains(err.Error(), dir) {
		t.Fatalf("Reopen of an unusable folder = %v, %v; want an error naming %s", reopened, err, dir)
	}
	if ferr := s.Failure(); ferr == nil || ferr.Error() != err.Error() {
		t.Errorf("Failure() after a failed Reopen = %v, want %v", ferr, err)
	}
	if _, err := s.Admit(ctx, admission.Request{Activity: "a", User: "late", Qty: 1, RequestID: "r"}); !errors.Is(err, errReopening) ||
		err.Error() != "admit a: store local: the folder is being opened again" {
		t.Errorf("admit while nothing is open = %v", err)
	}
	if _, _, err := s.AppendResult(ctx, nil, "a", "late"); !errors.Is(err, errReopening) {
		t.Errorf("get result while nothing is open = %v", err)
	}
	if _, err := s.Restocks(ctx); !errors.Is(err, errReopening) {
		t.Errorf("restocks while nothing is open = %v", err)
	}
	statsNotDown(t, "a failed Reopen", failed, s.Stats())
	// Again, still unusable: the same state.
	if reopened, err := s.Reopen(); reopened || err == nil {
		t.Errorf("second Reopen of an unusable folder = %v, %v; want an error", reopened, err)
	}

	// The folder back, and the next Reopen opens it.
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(away, dir); err != nil {
		t.Fatal(err)
	}
	if reopened, err := s.Reopen(); !reopened || err != nil {
		t.Fatalf("Reopen once the folder is back = %v, %v; want true, nil", reopened, err)
	}
	statsNotDown(t, "Reopen after a failed one", failed, s.Stats())
	checkWins(t, s, wins)

	// Close in the state a failed Reopen leaves: nothing to close; then Reopen is an error.
	failLocal(t, s, 40)
	rushUntilFull(t, s)
	if err := os.Rename(dir, away); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reopen(); err == nil {
		t.Fatal("Reopen of an unusable folder succeeded")
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close with nothing open = %v", err)
	}
	if reopened, err := s.Reopen(); reopened || !errors.Is(err, errLocalClosed) {
		t.Errorf("Reopen after Close = %v, %v; want the closed store's error", reopened, err)
	}
	if _, err := s.Remaining(ctx, "a"); !errors.Is(err, errLocalClosed) {
		t.Errorf("remaining after Close = %v, want the closed store's error", err)
	}
}

// TestLocalReopenUnderLoad fails the store three times while buyers admit through it and a
// started Guard listens to its restocks, and reopens it each time beside the calls: no call
// panics, every call answers a win or ErrFailed, Stats never goes down, and every win answered
// is in the folder afterwards. Run it with -race.
func TestLocalReopenUnderLoad(t *testing.T) {
	dir := t.TempDir()
	s := openLocal(t, dir, nil)
	defer s.Close()
	mustDefine(t, s, openAt(time.Now(), "a", 1<<40, 1))
	g := admission.NewGuard(s, admission.GuardOptions{ProbeInterval: 10 * time.Millisecond})
	g.Start(context.Background())
	defer g.Close() // before s.Close

	var (
		stop   atomic.Bool
		mu     sync.Mutex
		wins   = map[string]string{}
		failed atomic.Int64
		wg     sync.WaitGroup
	)
	for b := range 8 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				user := fmt.Sprintf("b%d-u%d-with-a-long-user-id-to-fill-pages-faster-%0100d", b, i, i)
				d, err := s.Admit(context.Background(), admission.Request{Activity: "a", User: user, Qty: 1, RequestID: "r"})
				switch {
				case errors.Is(err, ErrFailed):
					failed.Add(1)
				case err != nil:
					t.Errorf("admit: %v; want a win or ErrFailed", err)
					return
				case d.Outcome != admission.Won || d.Replayed || d.ReservationID == "":
					t.Errorf("admit of a new buyer = %+v; want a new win", d)
					return
				default:
					mu.Lock()
					wins[user] = d.ReservationID
					mu.Unlock()
				}
			}
		})
	}
	wg.Go(func() {
		was := s.Stats()
		for !stop.Load() {
			now := s.Stats()
			statsNotDown(t, "under load", was, now)
			was = now
			_ = s.Failure()
		}
	})
	winCount := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(wins)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				stop.Store(true)
				wg.Wait()
				t.Fatalf("no %s within 30s", what)
			}
		}
	}
	for cycle := range 3 {
		waitFor("wins", func() bool { return winCount() > 100*(cycle+1) })
		failLocal(t, s, 40)
		waitFor("failure", func() bool { return s.Failure() != nil })
		if reopened, err := s.Reopen(); !reopened || err != nil {
			stop.Store(true)
			wg.Wait()
			t.Fatalf("cycle %d: Reopen = %v, %v; want true, nil", cycle, reopened, err)
		}
		n := winCount()
		waitFor("wins after Reopen", func() bool { return winCount() > n+100 })
	}
	stop.Store(true)
	wg.Wait()
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openLocal(t, dir, nil)
	defer s.Close()
	checkWins(t, s, wins)
	t.Logf("%d wins, %d ErrFailed answers over three failures", len(wins), failed.Load())
}

// TestLocalReopenTmpfs is a real full file system, where the test may mount one: a Reopen while
// the disk is still full cannot commit the ring's changes and leaves nothing open; once there is
// room, the next Reopen opens the folder with every answered win.
func TestLocalReopenTmpfs(t *testing.T) {
	mnt := testsrv.Tmpfs(t, "20m") // the ring's 16 MiB, the database and room to fill
	dir := filepath.Join(mnt, "store")
	s := openLocal(t, dir, nil)
	defer s.Close() // before the tmpfs is unmounted
	mustDefine(t, s, openAt(time.Now(), "a", 1<<40, 1))
	filler := testsrv.Fill(t, mnt, 512<<10)
	wins, _ := rushUntilFull(t, s)
	failed := s.Stats()
	reopened, err := s.Reopen()
	t.Logf("Reopen on the full disk: %v, %v", reopened, err)
	if reopened || err == nil || s.Failure() == nil {
		t.Errorf("Reopen on the full disk = %v, %v, then Failure() = %v; want an error that stays", reopened, err, s.Failure())
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if reopened, err := s.Reopen(); !reopened || err != nil {
		t.Fatalf("Reopen with room again = %v, %v; want true, nil", reopened, err)
	}
	statsNotDown(t, "Reopen", failed, s.Stats())
	checkWins(t, s, wins)
}
