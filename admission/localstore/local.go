package localstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// ErrLocked is returned by Open when another process (or another Store in this
// one) holds the folder: two writers would each believe they own the stock.
var ErrLocked = errors.New("local store folder is locked by another process")

// ErrFailed is returned by every Store call after a commit failed (a full disk, an I/O
// error): the state in memory is then ahead of the disk, so the store answers nothing from it
// until it is reopened, which loads what was committed.
var ErrFailed = errors.New("local store failed; reopen it")

// errLocalClosed is returned by every Store call after Close.
var errLocalClosed = errors.New("local store is closed")

// Options configures a Store.
type Options struct {
	Now         func() time.Time // store clock; nil = time.Now (tests pass a fake clock)
	FsyncAlways bool             // flush each group commit to the device (power-loss safe); default:
	// each commit is handed to the OS before any answer (process-crash safe)

	// WaitTimeout bounds how long a call waits for the commit of its changes, so that a stalled
	// disk answers ErrWaitTimeout instead of holding its callers; 0: only the call's context
	// bounds it. One timer serves every caller of a commit, where a deadline in each caller's
	// context costs each call a timer of its own: the bound counts from the first of the callers
	// that share a timer, so a caller that joined later may be answered sooner.
	WaitTimeout time.Duration

	checkpointEvery time.Duration // tests: how often the writer checkpoints; 0 = localCheckpointEvery
	commitEvery     time.Duration // tests: the ring's commit schedule; 0 = localRingCommitEvery
}

// Store is the durable single-node Store. A Memory decides, with its semantics and its
// per-activity locks, and every change it makes is committed to an SQLite database in the store's
// folder before any answer that depends on it is returned. Concurrent callers share one
// transaction (group commit). Opening the folder again, after Close or a crash, loads what was
// committed: activities, stock, buyers, request ids, releases, results and the wins queue with its
// consumer groups and dead letters. docs/admission.md ("Durable local store") has the design.
//
// One process holds the folder at a time (ErrLocked). After a failed commit every call
// returns ErrFailed until the store is reopened. Restocks reach this process's subscribers
// only.
type Store struct {
	mem    *Memory
	dir    string
	w      *localWriter
	lock   *os.File // holds the folder's flock
	closed atomic.Bool
	// replayed is how many changes the open replayed from the ring, for Stats.
	replayed uint64
}

var _ admission.Store = (*Store)(nil)

// Open opens the durable store in dir, creating the folder and its database when they do
// not exist. A folder another process holds is ErrLocked; a database that is damaged, or not a
// store of this version, is an error: it is never replaced by an empty one.
func Open(dir string, opts Options) (*Store, error) {
	if dir == "" {
		return nil, fmt.Errorf("open local store: %w", admission.BadInput("empty folder"))
	}
	if opts.WaitTimeout < 0 {
		return nil, fmt.Errorf("open local store %s: %w", dir, admission.BadInput("negative wait timeout %s", opts.WaitTimeout))
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("open local store: create folder %s: %w", dir, err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	db, err := openLocalDB(dir, opts.FsyncAlways)
	if err != nil {
		_ = lock.Close()
		return nil, err
	}
	mem := NewMemory(MemoryOptions{Now: opts.Now})
	if err := loadLocal(db, mem); err != nil {
		_ = db.Close()
		_ = lock.Close()
		return nil, fmt.Errorf("open local store %s: load: %w", dir, err)
	}
	w, err := newLocalWriter(db, dir, mem.entryCounts(), opts)
	if err != nil {
		_ = db.Close()
		_ = lock.Close()
		return nil, err
	}
	ring, epoch, base, replayed, err := replayRing(db, dir, w, opts.FsyncAlways)
	if err == nil && replayed > 0 {
		// The ring held changes the database did not: load again, with them.
		mem = NewMemory(MemoryOptions{Now: opts.Now})
		if err = loadLocal(db, mem); err != nil {
			err = fmt.Errorf("load after the ring's replay: %w", err)
		}
		w.next = mem.entryCounts()
	}
	if err != nil {
		if ring != nil {
			_ = ring.close()
		}
		w.closeStmts()
		_ = db.Close()
		_ = lock.Close()
		return nil, fmt.Errorf("open local store %s: %w", dir, err)
	}
	w.start(ring, epoch, base)
	mem.jnl = w
	return &Store{mem: mem, dir: dir, w: w, lock: lock, replayed: uint64(replayed)}, nil
}

// Failure returns nil while the store works, and the error wrapping ErrFailed once a commit
// has failed: from then on every call fails until the store is closed and the folder opened again
// (after room was made on the disk), which loads what was committed. Whoever shares one store
// between configurations (Caddy's usage pool) can use it to replace a failed one at a reload.
func (s *Store) Failure() error {
	if err := s.w.failure(); errors.Is(err, ErrFailed) {
		return err
	}
	return nil
}

// Stats are a Store's group-commit counters since it was opened: Changes/Commits is the
// mean batch, and CommitTime/Commits what one commit costs, which together bound the wins a second
// the folder can take.
type Stats struct {
	Commits    uint64        // transactions committed
	Changes    uint64        // changes they held: wins, releases, result records, queue moves
	CommitTime time.Duration // time spent writing and committing them

	// Checkpoints fold the WAL into the database file, between two commits (about one a second
	// while commits come); commits wait meanwhile, so CheckpointTime/Checkpoints is a stall.
	Checkpoints       uint64
	CheckpointsFailed uint64        // checkpoints that failed (a full disk): the WAL grows meanwhile
	CheckpointTime    time.Duration // time the checkpoints took

	// Replayed is how many changes the open found in the ring and not in the database (a crash
	// came before their commit) and committed. Unringed counts the changes since that did not go
	// into the ring (its slots all held changes not yet committed, or the change was too large for
	// a slot): their callers waited for the commit. Both stay 0 with FsyncAlways, which has no ring.
	Replayed, Unringed uint64
}

// Stats returns the store's commit and checkpoint counters.
func (s *Store) Stats() Stats {
	w := s.w
	return Stats{
		Commits: w.commits.Load(), Changes: w.changes.Load(), CommitTime: time.Duration(w.busy.Load()),
		Checkpoints: w.checkpoints.Load(), CheckpointsFailed: w.checkpointsFailed.Load(),
		CheckpointTime: time.Duration(w.checkpointBusy.Load()),
		Replayed:       s.replayed, Unringed: w.unringed.Load(),
	}
}

// Exists reports whether dir holds a local store's database, without creating anything
// (Open creates a missing one): a tool that only reads a sale, as reconcile does, must
// not start an empty one in a mistyped folder.
func Exists(dir string) (bool, error) {
	_, err := os.Stat(filepath.Join(dir, localDBName))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	}
	return false, err
}

// before refuses a call on a closed or failed store.
func (s *Store) before() error {
	if s.closed.Load() {
		return errLocalClosed
	}
	return s.w.failure()
}

// after waits until every change made before it was called is committed, so that an answer never
// depends on a change a crash could still undo. It returns the store's failure, if any.
func (s *Store) after(ctx context.Context) error {
	if s.closed.Load() {
		return errLocalClosed
	}
	return s.w.wait(ctx)
}

// Define implements Store.
func (s *Store) Define(ctx context.Context, a admission.Activity, force bool) (admission.Activity, error) {
	if err := s.before(); err != nil {
		return admission.Activity{}, fmt.Errorf("define %s: %w", a.ID, err)
	}
	got, err := s.mem.Define(ctx, a, force)
	if werr := s.after(ctx); werr != nil {
		return admission.Activity{}, fmt.Errorf("define %s: %w", a.ID, werr)
	}
	return got, err
}

// Activity implements Store.
func (s *Store) Activity(ctx context.Context, id string) (admission.Snapshot, error) {
	if err := s.before(); err != nil {
		return admission.Snapshot{}, fmt.Errorf("activity %s: %w", id, err)
	}
	snap, err := s.mem.Activity(ctx, id)
	if werr := s.after(ctx); werr != nil {
		return admission.Snapshot{}, fmt.Errorf("activity %s: %w", id, werr)
	}
	return snap, err
}

// Activities implements Store.
func (s *Store) Activities(ctx context.Context) ([]string, error) {
	if err := s.before(); err != nil {
		return nil, fmt.Errorf("activities: %w", err)
	}
	ids, err := s.mem.Activities(ctx)
	if werr := s.after(ctx); werr != nil {
		return nil, fmt.Errorf("activities: %w", werr)
	}
	return ids, err
}

// Delete implements Store.
func (s *Store) Delete(ctx context.Context, id string, force bool) error {
	if err := s.before(); err != nil {
		return fmt.Errorf("delete %s: %w", id, err)
	}
	err := s.mem.Delete(ctx, id, force)
	if werr := s.after(ctx); werr != nil {
		return fmt.Errorf("delete %s: %w", id, werr)
	}
	return err
}

// Admit implements Store. A win is answered once it is committed, and so is a refusal, once the
// wins it was computed from are.
func (s *Store) Admit(ctx context.Context, r admission.Request) (admission.Decision, error) {
	if err := s.before(); err != nil {
		return admission.Decision{}, fmt.Errorf("admit %s: %w", r.Activity, err)
	}
	d, err := s.mem.Admit(ctx, r)
	if werr := s.after(ctx); werr != nil {
		return admission.Decision{}, fmt.Errorf("admit %s: %w", r.Activity, werr)
	}
	return d, err
}

// Release implements Store.
func (s *Store) Release(ctx context.Context, activity, reservationID string) (bool, error) {
	if err := s.before(); err != nil {
		return false, fmt.Errorf("release %s/%s: %w", activity, reservationID, err)
	}
	ok, err := s.mem.Release(ctx, activity, reservationID)
	if werr := s.after(ctx); werr != nil {
		return false, fmt.Errorf("release %s/%s: %w", activity, reservationID, werr)
	}
	return ok, err
}

// Remaining implements Store.
func (s *Store) Remaining(ctx context.Context, activity string) (int64, error) {
	if err := s.before(); err != nil {
		return 0, fmt.Errorf("remaining %s: %w", activity, err)
	}
	n, err := s.mem.Remaining(ctx, activity)
	if werr := s.after(ctx); werr != nil {
		return 0, fmt.Errorf("remaining %s: %w", activity, werr)
	}
	return n, err
}

// Holders implements Store.
func (s *Store) Holders(ctx context.Context, activity string) ([]string, error) {
	if err := s.before(); err != nil {
		return nil, fmt.Errorf("holders %s: %w", activity, err)
	}
	users, err := s.mem.Holders(ctx, activity)
	if werr := s.after(ctx); werr != nil {
		return nil, fmt.Errorf("holders %s: %w", activity, werr)
	}
	return users, err
}

// SetResult implements Store.
func (s *Store) SetResult(ctx context.Context, activity, user string, r admission.Result) error {
	if err := s.before(); err != nil {
		return fmt.Errorf("set result %s/%s: %w", activity, user, err)
	}
	err := s.mem.SetResult(ctx, activity, user, r)
	if werr := s.after(ctx); werr != nil {
		return fmt.Errorf("set result %s/%s: %w", activity, user, werr)
	}
	return err
}

// GetResult implements Store.
func (s *Store) GetResult(ctx context.Context, activity, user string) (admission.Result, error) {
	if err := s.before(); err != nil {
		return admission.Result{}, fmt.Errorf("get result %s/%s: %w", activity, user, err)
	}
	r, err := s.mem.GetResult(ctx, activity, user)
	if werr := s.after(ctx); werr != nil {
		return admission.Result{}, fmt.Errorf("get result %s/%s: %w", activity, user, werr)
	}
	return r, err
}

// AppendResult implements Store.
func (s *Store) AppendResult(ctx context.Context, dst []byte, activity, user string) ([]byte, string, error) {
	if err := s.before(); err != nil {
		return dst, "", fmt.Errorf("get result %s/%s: %w", activity, user, err)
	}
	out, code, err := s.mem.AppendResult(ctx, dst, activity, user)
	if werr := s.after(ctx); werr != nil {
		return dst, "", fmt.Errorf("get result %s/%s: %w", activity, user, werr)
	}
	return out, code, err
}

// Restocks implements Store: restocks of this process (the folder has one process).
func (s *Store) Restocks(ctx context.Context) (<-chan string, error) {
	if err := s.before(); err != nil {
		return nil, fmt.Errorf("restocks: %w", err)
	}
	return s.mem.Restocks(ctx)
}

// EnsureGroup implements Queue.
func (s *Store) EnsureGroup(ctx context.Context, activity, group string) error {
	if err := s.before(); err != nil {
		return fmt.Errorf("ensure group %s/%s: %w", activity, group, err)
	}
	err := s.mem.EnsureGroup(ctx, activity, group)
	if werr := s.after(ctx); werr != nil {
		return fmt.Errorf("ensure group %s/%s: %w", activity, group, werr)
	}
	return err
}

// ReadGroup implements Queue. Entries are delivered once their delivery is committed, so a
// consumer never holds an entry the store would forget it delivered.
func (s *Store) ReadGroup(ctx context.Context, activity, group, consumer string, count int, block time.Duration, pending bool) ([]admission.Win, error) {
	if err := s.before(); err != nil {
		return nil, fmt.Errorf("read group %s/%s: %w", activity, group, err)
	}
	wins, err := s.mem.ReadGroup(ctx, activity, group, consumer, count, block, pending)
	if werr := s.after(ctx); werr != nil {
		return nil, fmt.Errorf("read group %s/%s: %w", activity, group, werr)
	}
	return wins, err
}

// Ack implements Queue.
func (s *Store) Ack(ctx context.Context, activity, group string, ids ...string) error {
	if err := s.before(); err != nil {
		return fmt.Errorf("ack %s/%s: %w", activity, group, err)
	}
	err := s.mem.Ack(ctx, activity, group, ids...)
	if werr := s.after(ctx); werr != nil {
		return fmt.Errorf("ack %s/%s: %w", activity, group, werr)
	}
	return err
}

// Claim implements Queue.
func (s *Store) Claim(ctx context.Context, activity, group, consumer string, minIdle time.Duration, count int) ([]admission.Win, error) {
	if err := s.before(); err != nil {
		return nil, fmt.Errorf("claim %s/%s: %w", activity, group, err)
	}
	wins, err := s.mem.Claim(ctx, activity, group, consumer, minIdle, count)
	if werr := s.after(ctx); werr != nil {
		return nil, fmt.Errorf("claim %s/%s: %w", activity, group, werr)
	}
	return wins, err
}

// DeadLetter implements Queue.
func (s *Store) DeadLetter(ctx context.Context, activity, group string, w admission.Win, reason string) error {
	if err := s.before(); err != nil {
		return fmt.Errorf("dead letter %s/%s: %w", activity, group, err)
	}
	err := s.mem.DeadLetter(ctx, activity, group, w, reason)
	if werr := s.after(ctx); werr != nil {
		return fmt.Errorf("dead letter %s/%s: %w", activity, group, werr)
	}
	return err
}

// DeadLetters implements Queue.
func (s *Store) DeadLetters(ctx context.Context, activity string, count int) ([]admission.Win, error) {
	if err := s.before(); err != nil {
		return nil, fmt.Errorf("dead letters %s: %w", activity, err)
	}
	wins, err := s.mem.DeadLetters(ctx, activity, count)
	if werr := s.after(ctx); werr != nil {
		return nil, fmt.Errorf("dead letters %s: %w", activity, werr)
	}
	return wins, err
}

// Backlog implements Queue.
func (s *Store) Backlog(ctx context.Context, activity, group string) (int64, error) {
	if err := s.before(); err != nil {
		return 0, fmt.Errorf("backlog %s: %w", activity, err)
	}
	n, err := s.mem.Backlog(ctx, activity, group)
	if werr := s.after(ctx); werr != nil {
		return 0, fmt.Errorf("backlog %s: %w", activity, werr)
	}
	return n, err
}

// Close implements Store: it commits what is pending, closes the database and lets the folder go.
// Calls after Close fail.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	_ = s.mem.Close()  // ends blocking reads and subscriptions; later calls fail
	err := s.w.close() // a final checkpoint folds the whole WAL in
	if cerr := s.lock.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("close local store %s: unlock: %w", s.dir, cerr)
	}
	return err
}
