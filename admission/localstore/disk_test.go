package localstore

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// fillLocal defines "a" (stock n, limit 1) and lets n users win it.
func fillLocal(t *testing.T, s *Store, n int) {
	t.Helper()
	mustDefine(t, s, openAt(time.Now(), "a", int64(n), 1))
	for i := range n {
		mustAdmit(t, s, "a", fmt.Sprintf("user-%d", i), 1, "r")
	}
}

func TestLocalMissingFolderIsCreated(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "store")
	s := openLocal(t, dir, nil)
	fillLocal(t, s, 3)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openLocal(t, dir, nil)
	defer s.Close()
	if n := mustRemaining(t, s, "a"); n != 0 {
		t.Errorf("remaining after reopen = %d, want 0", n)
	}
}

func TestLocalUnusableFolder(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A folder under a regular file cannot be created, whoever runs the test (root included).
	under := filepath.Join(file, "store")
	if _, err := Open(under, Options{}); err == nil || !strings.Contains(err.Error(), under) {
		t.Errorf("open under a file = %v, want an error naming %s", err, under)
	}
	// The folder is a file.
	if _, err := Open(file, Options{}); err == nil || !strings.Contains(err.Error(), file) {
		t.Errorf("open a file as the folder = %v, want an error naming %s", err, file)
	}
	// The database is a folder.
	dir := filepath.Join(base, "db-is-dir")
	if err := os.MkdirAll(filepath.Join(dir, localDBName), 0o750); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, Options{}); err == nil {
		t.Error("open with a folder where the database belongs succeeded")
	}
	if _, err := Open("", Options{}); !errors.Is(err, admission.ErrBadInput) {
		t.Errorf("open \"\" = %v, want bad input", err)
	}
}

func TestLocalSecondOpener(t *testing.T) {
	dir := t.TempDir()
	s := openLocal(t, dir, nil)
	if _, err := Open(dir, Options{}); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), dir) {
		t.Errorf("second open in this process = %v, want ErrLocked naming %s", err, dir)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Another process holds it until it is killed; the kernel then lets the lock go.
	p, lines := startHelper(t, "scenario", dir)
	waitLine(t, lines, "DUMP ", nil)
	if _, err := Open(dir, Options{}); !errors.Is(err, ErrLocked) {
		t.Errorf("open while another process holds the folder = %v, want ErrLocked", err)
	}
	kill(t, p)
	s = openLocal(t, dir, nil)
	_ = s.Close()
}

// A Store dropped without Close still holds its folder: the collector must not let the LOCK go
// while SQLite keeps the database open (that once made a second opener meet SQLITE_BUSY).
func TestLocalDroppedStoreKeepsFolder(t *testing.T) {
	dir := t.TempDir()
	func() { _ = openLocal(t, dir, nil) }()
	for range 3 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond) // the os.File cleanups run on their own goroutine
	}
	if _, err := Open(dir, Options{}); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), dir) {
		t.Errorf("open after an unclosed store was collected = %v, want ErrLocked naming %s", err, dir)
	}
}

// Another program with the database open (the folder's LOCK free) is ErrLocked, not damage, and
// not admission.ErrInUse for reconcile (which would then ask a running Caddy that is not there).
func TestLocalDatabaseHeldElsewhere(t *testing.T) {
	dir := t.TempDir()
	s := openLocal(t, dir, nil)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	other, err := sql.Open("sqlite", filepath.Join(dir, localDBName))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Close() }()
	conn, err := other.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if _, err := conn.ExecContext(context.Background(), `BEGIN EXCLUSIVE`); err != nil {
		t.Fatal(err)
	}
	_, err = Open(dir, Options{})
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "open in another program") {
		t.Errorf("open while another program holds the database = %v, want ErrLocked", err)
	}
	// Reconcile's open must say so too, not take it for a running Caddy to ask instead.
	m := &Module{Dir: dir}
	if err := provision(t, m); err != nil {
		t.Fatal(err)
	}
	if _, err := m.OpenExisting(); errors.Is(err, admission.ErrInUse) || !strings.Contains(err.Error(), "open in another program") {
		t.Errorf("reconcile's open while another program holds the database = %v, want its error, not ErrInUse", err)
	}
	if _, err := conn.ExecContext(context.Background(), `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close()
	_ = other.Close()
	s = openLocal(t, dir, nil)
	_ = s.Close()
}

// damaged opens a store in a new folder, fills it and closes it, then lets hurt damage the files;
// the next open must fail with an error naming the database and leave the file as it was.
func damaged(t *testing.T, hurt func(db string)) {
	t.Helper()
	dir := t.TempDir()
	s := openLocal(t, dir, nil)
	fillLocal(t, s, 300)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, localDBName)
	hurt(db)
	before, _ := os.ReadFile(db)
	_, err := Open(dir, Options{})
	if err == nil {
		t.Fatal("a damaged store opened")
	}
	t.Logf("open: %v", err)
	if !strings.Contains(err.Error(), dir) {
		t.Errorf("error %q does not name the folder", err)
	}
	if after, _ := os.ReadFile(db); !bytes.Equal(before, after) {
		t.Error("the damaged database was changed by the failed open")
	}
}

func TestLocalDamagedDatabase(t *testing.T) {
	t.Run("Truncated", func(t *testing.T) {
		damaged(t, func(db string) {
			fi, err := os.Stat(db)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(db, fi.Size()/2); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("Empty", func(t *testing.T) {
		damaged(t, func(db string) {
			if err := os.Truncate(db, 0); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("GarbageHeader", func(t *testing.T) {
		damaged(t, func(db string) {
			f, err := os.OpenFile(db, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.WriteAt(bytes.Repeat([]byte{0xA5}, 100), 0)
			if err := errors.Join(err, f.Close()); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("CorruptPage", func(t *testing.T) {
		damaged(t, func(db string) {
			f, err := os.OpenFile(db, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			fi, _ := f.Stat()
			// Scribble over the middle of the last pages, where the wins are.
			_, err = f.WriteAt(bytes.Repeat([]byte{0x5A}, 3000), fi.Size()-6000)
			if err := errors.Join(err, f.Close()); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("OtherVersion", func(t *testing.T) {
		damaged(t, func(db string) {
			other, err := sql.Open("sqlite", db)
			if err == nil {
				_, err = other.Exec(`UPDATE meta SET value = '99' WHERE key = 'schema_version'`)
				err = errors.Join(err, other.Close())
			}
			if err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("WALWithoutDatabase", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, localDBName+"-wal"), []byte("frames"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(dir, Options{}); err == nil || !strings.Contains(err.Error(), "without") {
			t.Errorf("open with a WAL and no database = %v, want a refusal", err)
		}
		if _, err := os.Stat(filepath.Join(dir, localDBName)); !os.IsNotExist(err) {
			t.Errorf("a database was created beside the WAL: %v", err)
		}
	})
}

// rushUntilFull admits from many goroutines until every one of them got an error, and returns the
// wins that were answered and the users answered with the failure.
func rushUntilFull(t *testing.T, s *Store) (wins map[string]string, refused []string) {
	t.Helper()
	var mu sync.Mutex
	wins = map[string]string{}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := 0; i < 100000; i++ {
				user := fmt.Sprintf("g%d-u%d-with-a-long-user-id-to-fill-pages-faster-%0100d", g, i, i)
				d, err := s.Admit(context.Background(), admission.Request{Activity: "a", User: user, Qty: 1, RequestID: "r"})
				if err != nil {
					if !errors.Is(err, ErrFailed) {
						t.Errorf("admit on a full disk: %v, want ErrFailed", err)
					}
					mu.Lock()
					refused = append(refused, user)
					mu.Unlock()
					return
				}
				if d.Outcome != admission.Won {
					t.Errorf("admit = %+v", d)
					return
				}
				mu.Lock()
				wins[user] = d.ReservationID
				mu.Unlock()
			}
			t.Error("the disk never filled")
		})
	}
	wg.Wait()
	return wins, refused
}

// checkFullThenReopen checks that a failed store refuses everything, then reopens dir (after free
// makes room) and finds every answered win, and nothing of the buys answered with the failure:
// many of those were under way as the commit failed, their wins already in the ring.
func checkFullThenReopen(t *testing.T, s *Store, dir string, wins map[string]string, refused []string, free func()) {
	t.Helper()
	ctx := context.Background()
	if err := s.Failure(); !errors.Is(err, ErrFailed) {
		t.Errorf("Failure() = %v, want ErrFailed", err)
	}
	if _, err := s.Admit(ctx, admission.Request{Activity: "a", User: "late", Qty: 1, RequestID: "r"}); !errors.Is(err, ErrFailed) {
		t.Errorf("admit after the failure = %v, want ErrFailed", err)
	}
	if _, err := s.Remaining(ctx, "a"); !errors.Is(err, ErrFailed) {
		t.Errorf("remaining after the failure = %v, want ErrFailed", err)
	}
	if err := s.Close(); !errors.Is(err, ErrFailed) {
		t.Errorf("close = %v, want the failure", err)
	}
	free()
	s = openLocal(t, dir, nil)
	defer s.Close()
	if err := s.Failure(); err != nil {
		t.Errorf("Failure() after reopen = %v", err)
	}
	snap, err := s.Activity(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if snap.Sold != int64(len(wins)) || snap.Sold != snap.Queued {
		t.Errorf("after reopen: %+v; want exactly the %d wins answered", snap, len(wins))
	}
	for user, id := range wins {
		d, err := s.Admit(ctx, admission.Request{Activity: "a", User: user, Qty: 1, RequestID: "r"})
		if err != nil || !d.Replayed || d.ReservationID != id {
			t.Fatalf("answered win of %s after reopen = %+v, %v; want %s", user[:10], d, err, id)
		}
	}
	for _, user := range append(refused, "late") {
		d, err := s.Admit(ctx, admission.Request{Activity: "a", User: user, Qty: 1, RequestID: "r"})
		if err != nil || d.Outcome != admission.Won || d.Replayed {
			t.Errorf("retry of %s, answered the failure, after reopen = %+v, %v; want a new win", user[:min(10, len(user))], d, err)
		}
	}
	t.Logf("%d wins answered before the disk was full, %d buys answered the failure; %d on disk", len(wins), len(refused), snap.Sold)
}

// TestLocalDiskFull fills the database's page budget (SQLite's max_page_count, the limit a full
// disk sets) while many goroutines admit.
func TestLocalDiskFull(t *testing.T) {
	dir := t.TempDir()
	s := openLocal(t, dir, nil)
	mustDefine(t, s, openAt(time.Now(), "a", 1<<40, 1))
	var pages int
	if err := s.cur.Load().w.db.QueryRow(`PRAGMA page_count`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if _, err := s.cur.Load().w.db.Exec(fmt.Sprintf(`PRAGMA max_page_count = %d`, pages+40)); err != nil {
		t.Fatal(err)
	}
	wins, refused := rushUntilFull(t, s)
	checkFullThenReopen(t, s, dir, wins, refused, func() {})
}

// TestLocalDiskFullTmpfs is a real full file system: a small tmpfs, where the test may mount one.
func TestLocalDiskFullTmpfs(t *testing.T) {
	mnt := testsrv.Tmpfs(t, "20m") // the ring's 16 MiB, the database and room to fill
	dir := filepath.Join(mnt, "store")
	s := openLocal(t, dir, nil)
	mustDefine(t, s, openAt(time.Now(), "a", 1<<40, 1))
	// Leave a little room, so the sale fills it.
	filler := testsrv.Fill(t, mnt, 512<<10)
	wins, refused := rushUntilFull(t, s)
	checkFullThenReopen(t, s, dir, wins, refused, func() {
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
	})
}

// TestLocalStalledCommit holds the database's only connection, so that commits stall as on a hung
// disk: with fsync always (no ring) no answer may leave before its commit, a caller's context ends
// its wait, and the win it was not told about is committed and replayed afterwards. The ring's
// side is TestLocalRingStalledCommit.
func TestLocalStalledCommit(t *testing.T) {
	s, err := Open(t.TempDir(), Options{FsyncAlways: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustDefine(t, s, openAt(time.Now(), "a", 10, 1))
	bg := context.Background()
	conn, err := s.cur.Load().w.db.Conn(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close() // before s.Close, which commits
	ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
	defer cancel()
	if d, err := s.Admit(ctx, admission.Request{Activity: "a", User: "u1", Qty: 1, RequestID: "r"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("admit while the commit stalls = %+v, %v; want the deadline", d, err)
	}
	// A read computed from the uncommitted win is not answered either.
	ctx2, cancel2 := context.WithTimeout(bg, 200*time.Millisecond)
	defer cancel2()
	if n, err := s.Remaining(ctx2, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("remaining while the commit stalls = %d, %v; want the deadline", n, err)
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	d, err := s.Admit(bg, admission.Request{Activity: "a", User: "u1", Qty: 1, RequestID: "r"})
	if err != nil || d.Outcome != admission.Won || !d.Replayed {
		t.Errorf("retry after the stall = %+v, %v; want the replayed win", d, err)
	}
	if n := mustRemaining(t, s, "a"); n != 9 {
		t.Errorf("remaining = %d, want 9", n)
	}
}

// TestLocalWaitTimeout stalls the commits as TestLocalStalledCommit does (fsync always: every
// caller waits for its commit), with callers whose contexts have no deadline: WaitTimeout ends
// every caller's wait with ErrWaitTimeout (a context.DeadlineExceeded, which the edge answers
// 503 busy), and the wins none of them was told about are committed and replayed afterwards.
func TestLocalWaitTimeout(t *testing.T) {
	const bound = 150 * time.Millisecond
	s, err := Open(t.TempDir(), Options{WaitTimeout: bound, FsyncAlways: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustDefine(t, s, openAt(time.Now(), "a", 100, 1))
	// A commit that does not stall answers as before, also once a bound's time has passed.
	if d, err := s.Admit(context.Background(), admission.Request{Activity: "a", User: "before", Qty: 1, RequestID: "b"}); err != nil || d.Outcome != admission.Won {
		t.Fatalf("admit = %+v, %v", d, err)
	}
	time.Sleep(2 * bound)
	bg := context.Background()
	conn, err := s.cur.Load().w.db.Conn(bg)
	if err != nil {
		t.Fatal(err)
	}
	const callers = 20
	var wg sync.WaitGroup
	errs := make([]error, callers)
	took := make([]time.Duration, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			_, errs[i] = s.Admit(bg, admission.Request{Activity: "a", User: fmt.Sprintf("u%d", i), Qty: 1, RequestID: fmt.Sprintf("r%d", i)})
			took[i] = time.Since(t0)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, ErrWaitTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("caller %d while the commit stalls: %v; want ErrWaitTimeout", i, err)
		}
	}
	// The bound counts from the first of the callers that share a timer: that caller waits it
	// out in full, one who joined later may be answered sooner.
	if longest := slices.Max(took); longest < bound {
		t.Errorf("the callers gave up after at most %s, before the bound %s", longest, bound)
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range callers {
		d, err := s.Admit(bg, admission.Request{Activity: "a", User: fmt.Sprintf("u%d", i), Qty: 1, RequestID: fmt.Sprintf("r%d", i)})
		if err != nil || d.Outcome != admission.Won || !d.Replayed {
			t.Errorf("caller %d's retry after the stall = %+v, %v; want the replayed win", i, d, err)
		}
	}
	if n := mustRemaining(t, s, "a"); n != 100-1-callers {
		t.Errorf("remaining = %d, want %d", n, 100-1-callers)
	}
}

// TestLocalNegativeWaitTimeout: a negative bound is refused before the folder is touched.
func TestLocalNegativeWaitTimeout(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	if _, err := Open(dir, Options{WaitTimeout: -time.Second}); !errors.Is(err, admission.ErrBadInput) || !strings.Contains(err.Error(), "negative wait timeout") {
		t.Fatalf("open with a negative wait timeout: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the folder was created: %v", err)
	}
}

// TestLocalClose: Close ends blocking reads and subscriptions, commits what was answered, lets the
// folder go, and every later call fails.
func TestLocalClose(t *testing.T) {
	dir := t.TempDir()
	s := openLocal(t, dir, nil)
	ctx := context.Background()
	mustDefine(t, s, openAt(time.Now(), "a", 5, 1))
	ch, err := s.Restocks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureGroup(ctx, "a", "g"); err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := s.ReadGroup(ctx, "a", "g", "c", 1, time.Minute, false)
		read <- err
	}()
	mustAdmit(t, s, "a", "u1", 1, "r")
	// The win may or may not reach the blocked reader before Close; either way it is not lost.
	time.Sleep(20 * time.Millisecond)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-read:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a blocking read")
	}
	for range ch {
	}
	if _, err := s.Admit(ctx, admission.Request{Activity: "a", User: "u2", Qty: 1, RequestID: "r"}); err == nil {
		t.Error("admit after Close succeeded")
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	s = openLocal(t, dir, nil)
	defer s.Close()
	if d := mustAdmit(t, s, "a", "u1", 1, "r"); !d.Replayed {
		t.Errorf("u1's retry after Close and reopen = %+v, want the replay", d)
	}
	if n := mustRemaining(t, s, "a"); n != 4 {
		t.Errorf("remaining = %d, want 4", n)
	}
}

// winHookJournal hands every change to the writer, and runs onWin (once) in place of handing the
// first win: onWin decides when the win is handed (record) against the writer's failure.
type winHookJournal struct {
	w     *localWriter
	onWin func(record func() memTicket) memTicket
}

func (j *winHookJournal) record(c memChange) memTicket {
	if f := j.onWin; c.kind == changeWin && f != nil {
		j.onWin = nil
		return f(func() memTicket { return j.w.record(c) })
	}
	return j.w.record(c)
}

func (j *winHookJournal) recordAll(cs []memChange) { j.w.recordAll(cs) }

// TestLocalFailureAmidWin fails the commit (a full tmpfs) at either side of the moment a win is
// handed to the journal, while its buyer is between the decision and the answer: the interleaving
// that TestLocalDiskFullReload met under load, where a buy answered 503 busy was in the ring and
// the reload replayed it. Whatever a buyer is answered, the folder opened again agrees: a win is
// there with its reservation, a failure took nothing (a retry is a new win). In the ring a win
// handed before the failure is answered as the win it is; one handed after it is dropped, and
// with fsync always no win is answered without its commit.
func TestLocalFailureAmidWin(t *testing.T) {
	for _, fsync := range []bool{false, true} {
		for _, failFirst := range []bool{false, true} {
			name := fmt.Sprintf("fsync=%v/failure-before-the-win-is-handed=%v", fsync, failFirst)
			t.Run(name, func(t *testing.T) { failureAmidWin(t, fsync, failFirst) })
		}
	}
}

// fillUp writes a file in mnt until its file system is full (the writer may be growing the WAL
// meanwhile), and returns the file's path.
func fillUp(t *testing.T, mnt string) string {
	t.Helper()
	p := filepath.Join(mnt, "filler")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return p
		}
	}
}

func failureAmidWin(t *testing.T, fsync, failFirst bool) {
	mnt := testsrv.Tmpfs(t, "20m")
	dir := filepath.Join(mnt, "store")
	// Commits only when a caller waits for one, and no checkpoint, which would let the WAL be
	// written again from its start on the full disk.
	s, err := Open(dir, Options{FsyncAlways: fsync, commitEvery: time.Hour, checkpointEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close() // before the tmpfs is unmounted
	ctx := context.Background()
	now := time.Now()
	mustDefine(t, s, openAt(now, "a", 10, 1))
	mustDefine(t, s, openAt(now, "b", 10, 1))
	mustAdmit(t, s, "a", "u0", 1, "r")
	o := s.cur.Load()
	var filler string
	fail := func() {
		filler = fillUp(t, mnt)
		// Another buyer's win, in the other activity (the win's own lock is held here), is what
		// the failing commit holds when the win is handed after the failure.
		if _, err := s.Admit(ctx, admission.Request{Activity: "b", User: "x", Qty: 1, RequestID: "r"}); err != nil && !errors.Is(err, ErrFailed) {
			t.Errorf("admit of b on the full disk: %v", err)
		}
		o.w.mu.Lock()
		o.w.urgent = true // commit now, not on the ring's schedule
		o.w.mu.Unlock()
		o.w.signal()
		for deadline := time.Now().Add(10 * time.Second); !o.w.failed.Load(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the commit on the full disk did not fail")
			}
		}
	}
	o.mem.jnl = &winHookJournal{w: o.w, onWin: func(record func() memTicket) memTicket {
		if failFirst {
			fail()
			return record()
		}
		tk := record()
		fail()
		return tk
	}}
	d, admitErr := s.Admit(ctx, admission.Request{Activity: "a", User: "u1", Qty: 1, RequestID: "r"})
	won := admitErr == nil && d.Outcome == admission.Won
	if !won && !errors.Is(admitErr, ErrFailed) {
		t.Fatalf("admit amid the failure = %+v, %v; want a win or ErrFailed", d, admitErr)
	}
	// With fsync always a win handed before the failure may have been committed first: either
	// answer, as long as the folder agrees with it.
	if want := !fsync && !failFirst; (!fsync || failFirst) && won != want {
		t.Errorf("admit amid the failure = %+v, %v; want a win: %v", d, admitErr, want)
	}
	if err := s.Failure(); !errors.Is(err, ErrFailed) {
		t.Fatalf("Failure() = %v, want ErrFailed", err)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if reopened, err := s.Reopen(); !reopened || err != nil {
		t.Fatalf("Reopen with room again = %v, %v", reopened, err)
	}
	sold := int64(1) // u0
	if won {
		sold++
	}
	if n := mustRemaining(t, s, "a"); n != 10-sold {
		t.Errorf("remaining after the reopen = %d, want %d (u1 answered %+v, %v)", n, 10-sold, d, admitErr)
	}
	r, err := s.Admit(ctx, admission.Request{Activity: "a", User: "u1", Qty: 1, RequestID: "r"})
	switch {
	case err != nil || r.Outcome != admission.Won:
		t.Errorf("retry of u1 after the reopen = %+v, %v; want a win", r, err)
	case won && (!r.Replayed || r.ReservationID != d.ReservationID):
		t.Errorf("retry of u1, answered the win %s, after the reopen = %+v; want its replay", d.ReservationID, r)
	case !won && r.Replayed:
		t.Errorf("retry of u1, answered %v, after the reopen = %+v: the failed buy took an item", admitErr, r)
	}
}
