package localstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// ErrLocked is returned by Open when another process (or another Store in this
// one) holds the folder: two writers would each believe they own the stock.
var ErrLocked = errors.New("local store folder is locked by another process")

// errOpenElsewhere marks an ErrLocked whose folder lock was free but whose database another
// program (a sqlite3 shell, a backup tool) holds: not a running Caddy to ask instead.
var errOpenElsewhere = errors.New("is open in another program")

// ErrFailed is returned by every Store call after a commit failed (a full disk, an I/O
// error): the state in memory is then ahead of the disk, so the store answers nothing from it
// until it is reopened, which loads what was committed. A buy answered ErrFailed took nothing
// (one under way whose win is safe is answered that win: Admit).
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
// returns ErrFailed until the store is reopened (Reopen), but for a buy under way whose win is
// safe (Admit). Restocks reach this process's
// subscribers only.
type Store struct {
	dir  string
	opts Options
	// cur is the folder as Open, or the last Reopen, opened it; never nil.
	cur    atomic.Pointer[opening]
	closed atomic.Bool
	mu     sync.Mutex // serialises Reopen and Close
}

// opening is one opening of the folder: the state loaded from it, its writer and its lock. Reopen
// replaces it under every holder of the Store. An opening with no Memory stands for a Reopen that
// failed: nothing is open.
type opening struct {
	mem      *Memory
	w        *localWriter // holds the folder's flock too (localWriter.folderLock)
	replayed uint64       // changes this opening replayed from the ring, for Stats
	// earlier sums the counters of the openings Reopen closed before this one, so that Stats
	// never goes down.
	earlier Stats
	err     error // why nothing is open (mem is nil): the failed Reopen's error
}

// errReopening is what a call meets while a Reopen that failed left nothing open: a store error,
// as a failed commit is (503 busy at the edge).
var errReopening = errors.New("store local: the folder is being opened again")

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
	o, err := openFolder(dir, opts)
	if err != nil {
		return nil, err
	}
	s := &Store{dir: dir, opts: opts}
	s.cur.Store(o)
	return s, nil
}

// openFolder takes dir's lock, loads what was committed and replays the ring.
func openFolder(dir string, opts Options) (*opening, error) {
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
	w.folderLock = lock
	w.start(ring, epoch, base)
	mem.jnl = w
	return &opening{mem: mem, w: w, replayed: uint64(replayed)}, nil
}

// failure is the opening's ErrFailed once a commit has failed, or why nothing is open.
func (o *opening) failure() error {
	if o.mem == nil {
		return o.err
	}
	if err := o.w.failure(); errors.Is(err, ErrFailed) {
		return err
	}
	return nil
}

// close commits what is pending, closes the database and lets the folder go. Calls on the opening
// fail from then on.
func (o *opening) close() error {
	_ = o.mem.Close()  // ends blocking reads and subscriptions; later calls fail
	return o.w.close() // a final checkpoint folds the whole WAL in, then the folder is let go
}

// Reopen opens the folder again once the store has failed (Failure is not nil): it closes the
// failed opening, which lets the folder's lock go, and opens the folder as Open does, loading what
// was committed and replaying the ring. The same Store then serves every holder of it again; a
// call that was under way on the failed opening answers its error, as it would have. Reopen
// reports whether it opened the folder again: on a store that works it does nothing and reports
// false. When the folder cannot be opened (the disk is still full), nothing is open: every call
// answers a store error, Failure returns Reopen's error, and a later Reopen tries again. Stats
// carries on from the closed openings' counters. Reopen may run beside any other call; after Close
// it is an error.
func (s *Store) Reopen() (reopened bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return false, fmt.Errorf("reopen local store %s: %w", s.dir, errLocalClosed)
	}
	old := s.cur.Load()
	if old.failure() == nil {
		return false, nil
	}
	earlier := old.earlier
	if old.mem != nil {
		_ = old.close() // the failure, again: every call on it fails, as it did
		earlier = earlier.add(old.stats())
	}
	o, err := openFolder(s.dir, s.opts)
	if err != nil {
		err = fmt.Errorf("open the folder again after a failed commit: %w", err)
		s.cur.Store(&opening{earlier: earlier, err: err})
		return false, err
	}
	o.earlier = earlier
	s.cur.Store(o)
	return true, nil
}

// Failure returns nil while the store works, the error wrapping ErrFailed once a commit has
// failed, and Reopen's error while a Reopen that failed left nothing open: every call fails until
// Reopen (after room was made on the disk) opens the folder again, which loads what was committed.
// Whoever shares one store between configurations (Caddy's usage pool) reopens it at a reload.
func (s *Store) Failure() error { return s.cur.Load().failure() }

// Stats are a Store's group-commit counters since Open, Reopen's included: Changes/Commits is the
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

// Stats returns the store's commit and checkpoint counters: those of the openings Reopen closed
// plus the current one's, so that none ever goes down.
func (s *Store) Stats() Stats {
	o := s.cur.Load()
	if o.mem == nil {
		return o.earlier
	}
	return o.earlier.add(o.stats())
}

// stats are the opening's own counters.
func (o *opening) stats() Stats {
	w := o.w
	return Stats{
		Commits: w.commits.Load(), Changes: w.changes.Load(), CommitTime: time.Duration(w.busy.Load()),
		Checkpoints: w.checkpoints.Load(), CheckpointsFailed: w.checkpointsFailed.Load(),
		CheckpointTime: time.Duration(w.checkpointBusy.Load()),
		Replayed:       o.replayed, Unringed: w.unringed.Load(),
	}
}

func (a Stats) add(b Stats) Stats {
	return Stats{
		Commits: a.Commits + b.Commits, Changes: a.Changes + b.Changes, CommitTime: a.CommitTime + b.CommitTime,
		Checkpoints: a.Checkpoints + b.Checkpoints, CheckpointsFailed: a.CheckpointsFailed + b.CheckpointsFailed,
		CheckpointTime: a.CheckpointTime + b.CheckpointTime,
		Replayed:       a.Replayed + b.Replayed, Unringed: a.Unringed + b.Unringed,
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

// before returns the opening a call works on, or why there is none to work on: the store is
// closed, has failed, or a Reopen that failed left nothing open.
func (s *Store) before() (*opening, error) {
	if s.closed.Load() {
		return nil, errLocalClosed
	}
	o := s.cur.Load()
	if o.mem == nil {
		return nil, errReopening
	}
	return o, o.w.failure()
}

// after waits until every change made on o before it was called is committed, so that an answer
// never depends on a change a crash could still undo. It returns o's failure, if any.
func (s *Store) after(ctx context.Context, o *opening) error {
	if s.closed.Load() {
		return errLocalClosed
	}
	return o.w.wait(ctx)
}

// call is the shape of a call that reads or changes the state: f runs on the opening's Memory,
// and its answer is returned once every change it may depend on is committed. An error of the
// store (closed, failed, being reopened, the wait for the commit) replaces the answer, given
// context by wrap; f's own error is returned as it is.
func call[T any](s *Store, ctx context.Context, f func(*Memory) (T, error), wrap func(error) error) (T, error) {
	var zero T
	o, err := s.before()
	if err != nil {
		return zero, wrap(err)
	}
	v, err := f(o.mem)
	if werr := s.after(ctx, o); werr != nil {
		return zero, wrap(werr)
	}
	return v, err
}

// Define implements Store.
func (s *Store) Define(ctx context.Context, a admission.Activity, force bool) (admission.Activity, error) {
	return call(s, ctx, func(m *Memory) (admission.Activity, error) { return m.Define(ctx, a, force) },
		func(err error) error { return fmt.Errorf("define %s: %w", a.ID, err) })
}

// Activity implements Store.
func (s *Store) Activity(ctx context.Context, id string) (admission.Snapshot, error) {
	return call(s, ctx, func(m *Memory) (admission.Snapshot, error) { return m.Activity(ctx, id) },
		func(err error) error { return fmt.Errorf("activity %s: %w", id, err) })
}

// Activities implements Store.
func (s *Store) Activities(ctx context.Context) ([]string, error) {
	return call(s, ctx, func(m *Memory) ([]string, error) { return m.Activities(ctx) },
		func(err error) error { return fmt.Errorf("activities: %w", err) })
}

// Delete implements Store.
func (s *Store) Delete(ctx context.Context, id string, force bool) error {
	_, err := call(s, ctx, func(m *Memory) (struct{}, error) { return struct{}{}, m.Delete(ctx, id, force) },
		func(err error) error { return fmt.Errorf("delete %s: %w", id, err) })
	return err
}

// Admit implements Store. A win is answered once it is committed (or in the ring), and so is a
// refusal, once the wins it was computed from are. A win waits for its own change alone
// (waitChange), so that one the next open will replay is answered as the win it is even when a
// commit fails meanwhile: a buy answered with the failure took nothing. It is written out: through
// call, a sold-out refusal took about 30 ns (a quarter) longer.
func (s *Store) Admit(ctx context.Context, r admission.Request) (admission.Decision, error) {
	o, err := s.before()
	if err != nil {
		return admission.Decision{}, fmt.Errorf("admit %s: %w", r.Activity, err)
	}
	d, t, err := o.mem.admit(ctx, r)
	var werr error
	if err == nil && d.Outcome == admission.Won && !d.Replayed {
		werr = o.w.waitChange(ctx, t)
	} else {
		werr = s.after(ctx, o)
	}
	if werr != nil {
		return admission.Decision{}, fmt.Errorf("admit %s: %w", r.Activity, werr)
	}
	return d, err
}

// Replay implements Store. Like every call it waits for the changes it may have seen (after),
// so a replayed win is never answered before it is committed.
func (s *Store) Replay(ctx context.Context, activity, user, requestID string) (admission.Decision, error) {
	return call(s, ctx, func(m *Memory) (admission.Decision, error) { return m.Replay(ctx, activity, user, requestID) },
		func(err error) error { return fmt.Errorf("replay %s: %w", activity, err) })
}

// Release implements Store.
func (s *Store) Release(ctx context.Context, activity, reservationID string) (bool, error) {
	return call(s, ctx, func(m *Memory) (bool, error) { return m.Release(ctx, activity, reservationID) },
		func(err error) error { return fmt.Errorf("release %s/%s: %w", activity, reservationID, err) })
}

// Remaining implements Store.
func (s *Store) Remaining(ctx context.Context, activity string) (int64, error) {
	return call(s, ctx, func(m *Memory) (int64, error) { return m.Remaining(ctx, activity) },
		func(err error) error { return fmt.Errorf("remaining %s: %w", activity, err) })
}

// HeldRequests implements Store.
func (s *Store) HeldRequests(ctx context.Context, activity string) ([]string, error) {
	return call(s, ctx, func(m *Memory) ([]string, error) { return m.HeldRequests(ctx, activity) },
		func(err error) error { return fmt.Errorf("held requests %s: %w", activity, err) })
}

// SetResult implements Store.
func (s *Store) SetResult(ctx context.Context, activity, user string, r admission.Result) error {
	_, err := call(s, ctx, func(m *Memory) (struct{}, error) { return struct{}{}, m.SetResult(ctx, activity, user, r) },
		func(err error) error { return fmt.Errorf("set result %s/%s: %w", activity, user, err) })
	return err
}

// GetResult implements Store.
func (s *Store) GetResult(ctx context.Context, activity, user string) (admission.Result, error) {
	return call(s, ctx, func(m *Memory) (admission.Result, error) { return m.GetResult(ctx, activity, user) },
		func(err error) error { return fmt.Errorf("get result %s/%s: %w", activity, user, err) })
}

// AppendResult implements Store. It is written out: on a store error it returns dst, not nil.
func (s *Store) AppendResult(ctx context.Context, dst []byte, activity, user string) ([]byte, string, error) {
	o, err := s.before()
	if err != nil {
		return dst, "", fmt.Errorf("get result %s/%s: %w", activity, user, err)
	}
	out, code, err := o.mem.AppendResult(ctx, dst, activity, user)
	if werr := s.after(ctx, o); werr != nil {
		return dst, "", fmt.Errorf("get result %s/%s: %w", activity, user, werr)
	}
	return out, code, err
}

// Restocks implements Store: restocks of this process (the folder has one process). A
// subscription is to the opening of the moment: Reopen ends it, and the subscriber (the Guard)
// subscribes again.
func (s *Store) Restocks(ctx context.Context) (<-chan string, error) {
	o, err := s.before()
	if err != nil {
		return nil, fmt.Errorf("restocks: %w", err)
	}
	return o.mem.Restocks(ctx)
}

// EnsureGroup implements Queue.
func (s *Store) EnsureGroup(ctx context.Context, activity, group string) error {
	_, err := call(s, ctx, func(m *Memory) (struct{}, error) { return struct{}{}, m.EnsureGroup(ctx, activity, group) },
		func(err error) error { return fmt.Errorf("ensure group %s/%s: %w", activity, group, err) })
	return err
}

// ReadGroup implements Queue. Entries are delivered once their delivery is committed, so a
// consumer never holds an entry the store would forget it delivered.
func (s *Store) ReadGroup(ctx context.Context, activity, group, consumer string, count int, block time.Duration, pending bool) ([]admission.Win, error) {
	return call(s, ctx, func(m *Memory) ([]admission.Win, error) {
		return m.ReadGroup(ctx, activity, group, consumer, count, block, pending)
	}, func(err error) error { return fmt.Errorf("read group %s/%s: %w", activity, group, err) })
}

// Ack implements Queue.
func (s *Store) Ack(ctx context.Context, activity, group string, ids ...string) error {
	_, err := call(s, ctx, func(m *Memory) (struct{}, error) { return struct{}{}, m.Ack(ctx, activity, group, ids...) },
		func(err error) error { return fmt.Errorf("ack %s/%s: %w", activity, group, err) })
	return err
}

// Claim implements Queue.
func (s *Store) Claim(ctx context.Context, activity, group, consumer string, minIdle time.Duration, count int) ([]admission.Win, error) {
	return call(s, ctx, func(m *Memory) ([]admission.Win, error) {
		return m.Claim(ctx, activity, group, consumer, minIdle, count)
	}, func(err error) error { return fmt.Errorf("claim %s/%s: %w", activity, group, err) })
}

// DeadLetter implements Queue.
func (s *Store) DeadLetter(ctx context.Context, activity, group string, w admission.Win, reason string) error {
	_, err := call(s, ctx, func(m *Memory) (struct{}, error) { return struct{}{}, m.DeadLetter(ctx, activity, group, w, reason) },
		func(err error) error { return fmt.Errorf("dead letter %s/%s: %w", activity, group, err) })
	return err
}

// DeadLetters implements Queue.
func (s *Store) DeadLetters(ctx context.Context, activity string, count int) ([]admission.Win, error) {
	return call(s, ctx, func(m *Memory) ([]admission.Win, error) { return m.DeadLetters(ctx, activity, count) },
		func(err error) error { return fmt.Errorf("dead letters %s: %w", activity, err) })
}

// Backlog implements Queue.
func (s *Store) Backlog(ctx context.Context, activity, group string) (int64, error) {
	return call(s, ctx, func(m *Memory) (int64, error) { return m.Backlog(ctx, activity, group) },
		func(err error) error { return fmt.Errorf("backlog %s: %w", activity, err) })
}

// Close implements Store: it commits what is pending, closes the database and lets the folder go.
// Calls after Close fail; after a Reopen that failed there is nothing open to close.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if o := s.cur.Load(); o.mem != nil {
		return o.close()
	}
	return nil
}
