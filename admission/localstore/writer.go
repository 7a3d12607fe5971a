package localstore

import (
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// localWriter persists a Memory's changes: callers record them (under their activity's lock,
// so in order), and one goroutine commits everything recorded so far in one transaction (group
// commit). A caller waits for the commit that holds the changes its answer depends on; while one
// commit runs, the next batch gathers, with no timer, as in redisstore.Store's group admission.
type localWriter struct {
	db  *sql.DB
	dir string
	// folderLock holds dir's flock for as long as the database is open. The writer's goroutines
	// keep it reachable, so a Store dropped without Close never lets the folder go to the
	// os.File's cleanup while SQLite still holds the file.
	folderLock *os.File
	// waitTimeout bounds a caller's wait for its commit (Options.WaitTimeout); 0: no bound.
	waitTimeout time.Duration
	stmts       [localStmtCount]*sql.Stmt
	seq         int64 // the writer goroutine's last win's number (win_log's key counts wins)
	// row gathers the wins of the commit being written (winlog.go).
	row winLogRow
	// next is each activity's next win index, for the writer goroutine: a win that is not its
	// activity's next fails the commit, as a duplicate key did when the key was (activity, index).
	next map[string]int

	mu       sync.Mutex
	pending  []memChange   // recorded, not yet taken by the writer
	spare    []memChange   // the previous batch, reused
	gather   *localBatch   // the pending changes' commit
	flushing *localBatch   // the commit being written
	taken    uint64        // the last sequence number in the batch being committed
	err      error         // set once: a failed commit, or the writer stopped
	enq      atomic.Uint64 // sequence number of the last change recorded
	dur      atomic.Uint64 // every change up to this sequence number is committed
	failed   atomic.Bool
	commits  atomic.Uint64 // transactions committed
	changes  atomic.Uint64 // changes those transactions held
	busy     atomic.Int64  // nanoseconds spent in commit, for Stats

	// checkpointEvery is how often the writer checkpoints while commits come (checkpoint.go);
	// checkpointDue asks it for one, once syncLoop has flushed the WAL.
	checkpointEvery   time.Duration
	checkpointDue     atomic.Bool
	fsyncAlways       bool
	checkpoints       atomic.Uint64 // checkpoints run, for Stats
	checkpointsFailed atomic.Uint64 // of which failed or left frames behind
	checkpointBusy    atomic.Int64  // nanoseconds spent in them

	// ring, when set, holds every change not yet committed (ring.go): a change in it is
	// safe from a process crash, so its caller need not wait for the commit, and the writer
	// commits every commitEvery (localRingCommitEvery) instead of as soon as it can. Nil with
	// FsyncAlways.
	ring        *localRing
	commitEvery time.Duration // the ring mode's commit schedule (tests lengthen it)
	ringEpoch   uint64        // this opening's epoch, in every slot it writes
	ringBase    uint64        // the journal number of the change before this opening's first
	ringBuf     []byte        // a change packed for its slot; guarded by mu
	slow        atomic.Uint64 // the last change recorded that is not in the ring: callers wait for it
	urgent      bool          // a caller waits for the batch being gathered; guarded by mu
	unringed    atomic.Uint64 // changes that did not go into the ring, for Stats
	lastTake    time.Time     // when the writer last took a batch (its goroutine only)
	lazy        *time.Timer   // the writer's wait for the next commit in ring mode

	wake     chan struct{} // capacity 1: changes are pending, or a checkpoint is due
	stop     chan struct{} // closed by close
	done     chan struct{} // closed when the writer goroutine has ended
	syncDone chan struct{} // closed when syncLoop has ended
}

// localBatch is one commit as its callers wait for it.
type localBatch struct {
	done chan struct{} // closed when the batch is committed (or never will be)
	// late is closed waitTimeout after the batch's first caller began to wait, by a timer that
	// caller armed: one timer per commit rather than a deadline per call, which cost a buy more
	// than its share of the commit (docs/BENCHMARKS.md). A caller that comes once it has closed
	// arms the next one. Guarded by localWriter.mu.
	late  chan struct{}
	timer *time.Timer
}

func newLocalBatch() *localBatch { return &localBatch{done: make(chan struct{})} }

// lateChan returns a channel closed at most waitTimeout from now, shared with the callers of the
// batch that came before within the same window; nil (never ready) without a bound. The caller
// holds w.mu.
func (w *localWriter) lateChan(b *localBatch) <-chan struct{} {
	if w.waitTimeout <= 0 {
		return nil
	}
	if b.late != nil {
		select {
		case <-b.late: // that window has passed: this caller gets a new one
		default:
			return b.late
		}
	}
	late := make(chan struct{})
	b.late, b.timer = late, time.AfterFunc(w.waitTimeout, func() { close(late) })
	return late
}

// finish wakes the batch's callers and stops its timer. The caller holds w.mu.
func (b *localBatch) finish() {
	select {
	case <-b.done:
		return
	default:
	}
	close(b.done)
	if b.timer != nil {
		b.timer.Stop()
	}
}

// The writer's prepared statements.
const (
	stmtDefine = iota
	stmtWinLog
	stmtRelease
	stmtResult
	stmtGroup
	stmtPending
	stmtNext
	stmtAck
	stmtDead
	stmtDelActivity
	stmtDelReleased
	stmtDelResults
	stmtDelGroups
	stmtDelPending
	stmtDelDead
	stmtDelLine
	stmtJoin
	stmtDraw
	stmtTerms
	stmtWinLogUpdate
	stmtWinLogDelete
	stmtMeta
	localStmtCount
)

var localStmtText = [localStmtCount]string{
	stmtDefine: `INSERT INTO activities (id, stock, lim, start_ms, end_ms, pay_ms, salt) VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET stock = excluded.stock, lim = excluded.lim, start_ms = excluded.start_ms,
		end_ms = excluded.end_ms, pay_ms = excluded.pay_ms, salt = excluded.salt`,
	stmtWinLog:  localWinLogInsert,
	stmtRelease: `INSERT INTO released (activity, id) VALUES (?, ?)`,
	stmtResult: `INSERT INTO results (activity, user, code, reservation_id, order_id, pay_before_ms, after_wins, reservations) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (activity, user) DO UPDATE SET code = excluded.code, reservation_id = excluded.reservation_id,
		order_id = excluded.order_id, pay_before_ms = excluded.pay_before_ms, after_wins = excluded.after_wins,
		reservations = excluded.reservations`,
	stmtGroup: `INSERT INTO groups (activity, name, next) VALUES (?, ?, 0)`,
	stmtPending: `INSERT INTO pending (activity, grp, idx, consumer, deliveries, at_ns) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (activity, grp, idx) DO UPDATE SET consumer = excluded.consumer,
		deliveries = excluded.deliveries, at_ns = excluded.at_ns`,
	stmtNext:         `UPDATE groups SET next = ? WHERE activity = ? AND name = ?`,
	stmtAck:          `DELETE FROM pending WHERE activity = ? AND grp = ? AND idx = ?`,
	stmtDead:         `INSERT INTO dead (activity, idx, deliveries, reason) VALUES (?, ?, ?, ?)`,
	stmtDelActivity:  `DELETE FROM activities WHERE id = ?`,
	stmtDelReleased:  `DELETE FROM released WHERE activity = ?`,
	stmtDelResults:   `DELETE FROM results WHERE activity = ?`,
	stmtDelGroups:    `DELETE FROM groups WHERE activity = ?`,
	stmtDelPending:   `DELETE FROM pending WHERE activity = ?`,
	stmtDelDead:      `DELETE FROM dead WHERE activity = ?`,
	stmtDelLine:      `DELETE FROM line WHERE activity = ?`,
	stmtJoin:         `INSERT INTO line (activity, user, early, at, interval_ms) VALUES (?, ?, ?, ?, ?)`,
	stmtDraw:         `UPDATE activities SET line_drawn = 1 WHERE id = ?`,
	stmtTerms:        `UPDATE activities SET line_interval_ms = ?, line_session_ms = ? WHERE id = ?`,
	stmtWinLogUpdate: `UPDATE win_log SET n = ?, data = ? WHERE seq = ?`,
	stmtWinLogDelete: `DELETE FROM win_log WHERE seq = ?`,
	stmtMeta:         localSetMeta,
}

// newLocalWriter prepares the writer of db (in dir), whose activities have next[id] wins each,
// with opts' WaitTimeout, FsyncAlways and checkpointEvery; start starts it.
func newLocalWriter(db *sql.DB, dir string, next map[string]int, opts Options) (*localWriter, error) {
	if opts.checkpointEvery <= 0 {
		opts.checkpointEvery = localCheckpointEvery
	}
	if opts.commitEvery <= 0 {
		opts.commitEvery = localRingCommitEvery
	}
	w := &localWriter{
		db: db, dir: dir, next: next, waitTimeout: opts.WaitTimeout,
		checkpointEvery: opts.checkpointEvery, fsyncAlways: opts.FsyncAlways, commitEvery: opts.commitEvery,
		gather: newLocalBatch(), flushing: newLocalBatch(),
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}), syncDone: make(chan struct{}),
	}
	w.flushing.finish() // nothing is being committed yet
	if err := db.QueryRow(`SELECT COALESCE((SELECT seq + n - 1 FROM win_log ORDER BY seq DESC LIMIT 1), 0)`).Scan(&w.seq); err != nil {
		return nil, fmt.Errorf("open local store %s: last win: %w", dir, err)
	}
	for i, text := range localStmtText {
		st, err := db.Prepare(text)
		if err != nil {
			w.closeStmts()
			return nil, fmt.Errorf("open local store %s: prepare: %w", dir, err)
		}
		w.stmts[i] = st
	}
	return w, nil
}

// start starts the writer's goroutines; with ring set, callers whose changes went into the ring
// (epoch's slots, numbered from base+1) are answered without waiting for their commit.
func (w *localWriter) start(ring *localRing, epoch, base uint64) {
	w.ring, w.ringEpoch, w.ringBase = ring, epoch, base
	w.lastTake = time.Now()
	go w.run()
	go w.syncLoop()
}

// record implements memJournal. Changes recorded after a failure or after the writer stopped are
// dropped: their callers get the writer's error from wait (and the zero ticket).
func (w *localWriter) record(c memChange) memTicket {
	return w.recordOp([]memChange{c}) // cs does not escape: no allocation
}

// recordAll implements memJournal: recordOp, for an operation whose callers wait as wait does.
func (w *localWriter) recordAll(cs []memChange) { w.recordOp(cs) }

// recordOp records the changes of one operation under one lock, so that the writer's next batch
// takes all of them or none, and returns the operation's ticket.
func (w *localWriter) recordOp(cs []memChange) memTicket {
	w.mu.Lock()
	if w.err != nil {
		w.mu.Unlock()
		return memTicket{}
	}
	first := w.enq.Load() + 1
	last := first + uint64(len(cs)) - 1
	wake := true
	if w.ring != nil {
		if !w.putRing(cs, first) {
			w.slow.Store(last)
			w.unringed.Add(uint64(len(cs)))
		}
		// The writer commits on its own schedule (lazyWait): it needs waking only for the first
		// change of a batch, or at once when the ring's slots run short.
		short := len(w.pending) >= localRingSlots/4
		w.urgent = w.urgent || short
		wake = len(w.pending) == 0 || short
	}
	w.pending = append(w.pending, cs...)
	w.enq.Store(last)
	t := memTicket{seq: last, slow: w.slow.Load()}
	w.mu.Unlock()
	if wake {
		w.signal()
	}
	return t
}

// signal wakes the writer goroutine.
func (w *localWriter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// putRing copies the changes of one operation, numbered from first, into the ring, and reports
// whether all of them are there. A change whose slot still holds one not yet committed, or that
// does not fit a slot, is not: its operation's callers then wait for the commit. The caller holds
// w.mu.
func (w *localWriter) putRing(cs []memChange, first uint64) bool {
	for i := range cs {
		seq := first + uint64(i)
		if seq > localRingSlots && seq-localRingSlots > w.dur.Load() {
			return false
		}
		b, err := appendChange(w.ringBuf[:0], &cs[i])
		w.ringBuf = b
		if err != nil || !w.ring.put(w.ringBase+seq, w.ringEpoch, cs[i].kind, i == len(cs)-1, b) {
			return false
		}
	}
	return true
}

// failure returns the writer's error once a commit failed or it stopped.
func (w *localWriter) failure() error {
	if !w.failed.Load() {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// ErrWaitTimeout is returned when a call's commit took longer than Options.WaitTimeout.
// Its changes may still be committed, as a Redis call whose answer was lost may have run. It
// wraps context.DeadlineExceeded, which callers already treat as a store that is too slow.
var ErrWaitTimeout = fmt.Errorf("local store: the commit took longer than the wait timeout: %w", context.DeadlineExceeded)

// wait returns once every change recorded before it was called is committed, or with ctx's error
// or ErrWaitTimeout (the changes may then still be committed, as a Redis call whose answer
// was lost may have run). Once the writer has failed it returns the failure, even for a caller
// whose own changes were committed: a change recorded after the failure was dropped without a
// sequence number, so no caller can tell that its answer does not depend on one (waitChange can,
// for a win).
//
// In ring mode a change in the ring is as safe from a process crash as a committed one: the call
// returns at once unless a change recorded before it is not in the ring and not yet committed.
func (w *localWriter) wait(ctx context.Context) error {
	seq := w.enq.Load()
	if dur := w.dur.Load(); dur >= seq || (w.ring != nil && w.slow.Load() <= dur) {
		return w.failure()
	}
	if err := w.waitCommit(ctx, seq); err != nil {
		return err
	}
	return w.failure()
}

// waitChange returns once the operation t numbers is safe: committed, or in the ring behind no
// change that waits for a commit, so that the next open replays it. It answers so after a
// failure too: the change is then replayed when the folder is opened again, and an error would
// tell its caller that nothing was done. A change the journal dropped (recorded after the
// failure) is the failure, and so is one that needed the commit that failed: neither is replayed.
// Errors as wait's.
func (w *localWriter) waitChange(ctx context.Context, t memTicket) error {
	if t.seq == 0 {
		if err := w.failure(); err != nil {
			return err
		}
		return fmt.Errorf("local store %s: %w: a change was not recorded", w.dir, ErrFailed)
	}
	need := t.seq
	if w.ring != nil {
		need = t.slow // 0 when every change so far went into the ring
	}
	if w.dur.Load() >= need {
		return nil
	}
	return w.waitCommit(ctx, need)
}

// waitCommit waits until every change up to seq is committed; nil once they are, even when the
// writer failed later. Otherwise the failure, ctx's error or ErrWaitTimeout.
func (w *localWriter) waitCommit(ctx context.Context, seq uint64) error {
	w.mu.Lock()
	if w.dur.Load() >= seq {
		w.mu.Unlock()
		return nil
	}
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return err
	}
	b := w.gather
	if seq <= w.taken {
		b = w.flushing
	} else if w.ring != nil && !w.urgent {
		w.urgent = true // the writer stops waiting for its schedule
		w.signal()
	}
	late := w.lateChan(b)
	w.mu.Unlock()
	var gaveUp error
	select {
	case <-b.done:
	case <-late:
		gaveUp = fmt.Errorf("%w (%s)", ErrWaitTimeout, w.waitTimeout)
	case <-ctx.Done():
		gaveUp = fmt.Errorf("waiting for the commit: %w", ctx.Err())
	}
	// The commit may have landed as the wait ended: then the answer stands.
	if w.dur.Load() >= seq {
		return nil
	}
	if err := w.failure(); err != nil {
		return err
	}
	if gaveUp != nil {
		return gaveUp
	}
	return fmt.Errorf("local store %s: %w: change %d woke before its commit", w.dir, ErrFailed, seq)
}

// run is the writer goroutine: one transaction per batch, in the order the changes were recorded,
// and a checkpoint between two batches when syncLoop asks for one.
func (w *localWriter) run() {
	defer close(w.done)
	for {
		stopping := false
		select {
		case <-w.wake:
		case <-w.stop:
			stopping = true
		}
		for {
			if w.checkpointDue.Swap(false) && !stopping {
				w.checkpoint()
			}
			if w.ring == nil || !w.lazyWait(stopping) {
				w.gatherBatch()
			}
			w.mu.Lock()
			batch, last, done := w.pending, w.enq.Load(), w.gather
			if len(batch) == 0 {
				if stopping {
					// Under the lock that found nothing pending: a change recorded after this
					// check would sit in the ring uncommitted while close marks the ring clean.
					w.fail(fmt.Errorf("local store %s: %w", w.dir, errLocalClosed))
					w.mu.Unlock()
					return
				}
				w.mu.Unlock()
				break
			}
			w.pending, w.spare = w.spare[:0], nil
			w.flushing, w.taken, w.gather = done, last, newLocalBatch()
			w.urgent = false
			w.mu.Unlock()
			t0 := time.Now()
			w.lastTake = t0
			journal := uint64(0)
			if w.ring != nil {
				journal = w.ringBase + last
			}
			err := w.commit(batch, journal)
			took := time.Since(t0)
			clear(batch) // let the strings go
			w.mu.Lock()
			w.spare = batch[:0]
			if err != nil {
				w.fail(fmt.Errorf("local store %s: %w: commit %d changes: %w", w.dir, ErrFailed, len(batch), err))
				w.mu.Unlock()
				return
			}
			w.dur.Store(last)
			w.commits.Add(1)
			w.changes.Add(uint64(len(batch)))
			w.busy.Add(int64(took))
			done.finish()
			w.mu.Unlock()
			if !stopping {
				break
			}
		}
	}
}

// localRingCommitEvery is how often the writer commits in ring mode, where no caller waits for
// it: a commit costs about the same for 10 changes as for 100, so a lazy writer costs a buy less.
const localRingCommitEvery = 2 * time.Millisecond

// lazyWait holds the writer in ring mode until commitEvery after it last took a batch,
// or until a caller waits for the batch, the ring's slots run short, a checkpoint is due or the
// store stops. It reports whether it held the writer on its schedule (not for a waiting caller).
func (w *localWriter) lazyWait(stopping bool) bool {
	for !stopping && !w.checkpointDue.Load() {
		w.mu.Lock()
		urgent := w.urgent
		w.mu.Unlock()
		if urgent {
			return false
		}
		d := time.Until(w.lastTake.Add(w.commitEvery))
		if d <= 0 {
			return true
		}
		if w.lazy == nil {
			w.lazy = time.NewTimer(d)
		} else {
			w.lazy.Reset(d)
		}
		select {
		case <-w.lazy.C:
			return true
		case <-w.wake: // look again: a caller may be waiting
		case <-w.stop:
			w.lazy.Stop()
			return true
		}
		w.lazy.Stop()
	}
	return true
}

// localGatherYields bounds how often the writer yields before it takes a batch.
const localGatherYields = 8

// gatherBatch lets the callers woken by the last commit, who are about to record their next
// change, join the batch: the writer yields the processor while the batch keeps growing. A
// commit costs about the same for 5 wins as for 40 (it writes a page per activity touched), so
// each yield that adds callers saves a commit's share for each; once nobody joins any more
// (a lone caller: at the second yield), the batch is taken.
func (w *localWriter) gatherBatch() {
	n := -1
	for range localGatherYields {
		runtime.Gosched()
		w.mu.Lock()
		p := len(w.pending)
		w.mu.Unlock()
		if p == n {
			return
		}
		n = p
	}
}

// fail sets the writer's error and wakes every waiter; later changes are dropped. The caller holds
// w.mu.
func (w *localWriter) fail(err error) {
	w.err = err
	w.failed.Store(true)
	w.pending = nil
	w.flushing.finish()
	w.gather.finish()
}

// localMaxWinBytes bounds one packed win (appendWin): the longest ids (an entry id is two uint64s
// and a dash, nextID), a length of at most two bytes before each string, and four numbers.
const localMaxWinBytes = admission.MaxActivityIDLen + admission.MaxUserIDLen + admission.MaxRequestIDLen + 41 + 4*2 + 4*binary.MaxVarintLen64

// localOneRowWins is the most wins a batch may hold to be written by commitWins, so that its one
// row stays within localWinLogMax.
const localOneRowWins = localWinLogMax / localMaxWinBytes

// commit writes one batch in one transaction: a batch of wins alone as one statement (commitWins),
// any other between BEGIN and COMMIT. A journal number other than 0 (ring mode) is stored with
// the batch, in the same transaction: the number of its last change, after which the next open
// replays the ring.
func (w *localWriter) commit(batch []memChange, journal uint64) (err error) {
	w.row.data, w.row.n = w.row.data[:0], 0
	if journal == 0 && oneRowOfWins(batch) {
		return w.commitWins(batch)
	}
	tx, err := w.db.Begin()
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	var st [localStmtCount]*sql.Stmt
	exec := func(i int, args ...any) error {
		if st[i] == nil {
			st[i] = tx.Stmt(w.stmts[i])
		}
		_, err := st[i].Exec(args...)
		return err
	}
	for i := range batch {
		c := &batch[i]
		switch c.kind {
		case changeWin:
			full, err := w.packWin(c)
			if err == nil && full {
				err = w.flushWins(exec)
			}
			if err != nil {
				return err
			}
			continue
		case changeDelete:
			// The wins packed so far may be the deleted activity's: write them first, so the
			// delete finds them.
			if err := w.flushWins(exec); err != nil {
				return err
			}
			if err := w.deleteWins(tx, exec, c.act); err != nil {
				return err
			}
		}
		if err := w.apply(exec, c); err != nil {
			return err
		}
	}
	if err := w.flushWins(exec); err != nil {
		return err
	}
	if journal != 0 {
		if err := exec(stmtMeta, "journal_seq", strconv.FormatUint(journal, 10)); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// oneRowOfWins reports whether batch is wins alone, few enough for one win_log row: a sale's
// usual batch, which commitWins writes.
func oneRowOfWins(batch []memChange) bool {
	if len(batch) > localOneRowWins {
		return false
	}
	for i := range batch {
		if batch[i].kind != changeWin {
			return false
		}
	}
	return true
}

// commitWins writes a batch of wins as one win_log row with one INSERT in SQLite's autocommit
// mode: one statement is a transaction of its own, as atomic and durable as BEGIN ... COMMIT,
// without those two statements' work, which cost more than the INSERT (docs/BENCHMARKS.md).
func (w *localWriter) commitWins(batch []memChange) error {
	for i := range batch {
		if _, err := w.packWin(&batch[i]); err != nil {
			return err
		}
	}
	return w.flushWins(func(i int, args ...any) error {
		_, err := w.stmts[i].Exec(args...)
		return err
	})
}

// packWin adds win c to the commit's win_log row, numbering it, and reports whether the row is
// full. A win that is not its activity's next is an error (a bug in the journal's order), which
// fails the commit.
func (w *localWriter) packWin(c *memChange) (full bool, err error) {
	if n := w.next[c.act]; c.idx != n {
		return false, fmt.Errorf("win %d of %s recorded where win %d was due", c.idx, c.act, n)
	}
	w.next[c.act] = c.idx + 1
	w.seq++
	return w.row.add(w.seq, c.act, c.idx, &c.entry, c.remaining), nil
}

// flushWins writes the packed wins as one win_log row.
func (w *localWriter) flushWins(exec func(int, ...any) error) error {
	return w.row.flush(func(seq int64, n int, data []byte) error { return exec(stmtWinLog, seq, n, data) })
}

// deleteWins removes activity act's wins from win_log: every row is read, and the rows holding
// some of them are written again without them (or deleted). An administrator's rare call, which
// holds up that one commit.
func (w *localWriter) deleteWins(tx *sql.Tx, exec func(int, ...any) error, act string) error {
	type change struct {
		seq  int64
		n    int
		data []byte
	}
	var changes []change
	err := eachTxRow(tx, `SELECT seq, n, data FROM win_log`, func(rows *sql.Rows) error {
		var seq int64
		var n int
		var data sql.RawBytes
		if err := rows.Scan(&seq, &n, &data); err != nil {
			return err
		}
		var kept []byte
		keptN, found := 0, false
		err := decodeWins(data, n, func(pw *packedWin) error {
			if pw.act == act {
				found = true
				return nil
			}
			kept = appendWin(kept, pw.act, pw.idx, &pw.entry, pw.remaining)
			keptN++
			return nil
		})
		if err != nil {
			return fmt.Errorf("win_log row %d: %w", seq, err)
		}
		if found {
			changes = append(changes, change{seq, keptN, kept})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete the wins of %s: %w", act, err)
	}
	for _, c := range changes {
		if c.n == 0 {
			err = exec(stmtWinLogDelete, c.seq)
		} else {
			err = exec(stmtWinLogUpdate, c.n, c.data, c.seq)
		}
		if err != nil {
			return fmt.Errorf("delete the wins of %s: %w", act, err)
		}
	}
	return nil
}

// apply writes one change.
func (w *localWriter) apply(exec func(int, ...any) error, c *memChange) error {
	switch c.kind {
	case changeDefine:
		d := c.def
		return exec(stmtDefine, d.ID, d.Stock, d.Limit, d.Start.UnixMilli(), d.End.UnixMilli(), d.PayWithin.Milliseconds(), d.Salt)
	case changeDelete:
		delete(w.next, c.act)
		for i := stmtDelActivity; i <= stmtDelLine; i++ {
			if err := exec(i, c.act); err != nil {
				return err
			}
		}
		return nil
	case changeRelease:
		return exec(stmtRelease, c.act, c.entry.id)
	case changeResult:
		r := &c.result
		resvs := ""
		if r.Reservations != nil {
			b, err := json.Marshal(r.Reservations)
			if err != nil {
				return fmt.Errorf("result %s/%s: %w", c.act, c.user, err)
			}
			resvs = string(b)
		}
		return exec(stmtResult, c.act, c.user, r.Code, r.ReservationID, r.OrderID, r.PayBeforeMS, c.idx, resvs)
	case changeGroup:
		return exec(stmtGroup, c.act, c.group)
	case changePending:
		p := &c.pend
		return exec(stmtPending, c.act, c.group, c.idx, p.consumer, p.deliveries, p.at.UnixNano())
	case changeNext:
		return exec(stmtNext, c.idx, c.act, c.group)
	case changeAck:
		return exec(stmtAck, c.act, c.group, c.idx)
	case changeDead:
		if err := exec(stmtAck, c.act, c.group, c.idx); err != nil {
			return err
		}
		return exec(stmtDead, c.act, c.idx, c.pend.deliveries, c.reason)
	case changeJoin:
		return exec(stmtJoin, c.act, c.user, c.early, c.at, c.interval)
	case changeDraw:
		return exec(stmtDraw, c.act)
	case changeTerms:
		return exec(stmtTerms, c.interval, int64(c.at), c.act)
	}
	return fmt.Errorf("unknown change kind %d", c.kind)
}

// close commits what is pending, stops the goroutine and closes the database.
func (w *localWriter) close() error {
	close(w.stop)
	<-w.done
	<-w.syncDone
	w.mu.Lock()
	err := w.err
	w.mu.Unlock()
	w.closeStmts()
	var dbErr error
	if !errors.Is(err, ErrFailed) {
		// Everything recorded is committed: the ring holds nothing the database lacks, and may
		// go missing before the next open without loss.
		dbErr = setLocalMeta(w.db, w.ringEpoch, "ring_clean")
		if _, cerr := w.db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); dbErr == nil {
			dbErr = cerr
		}
	}
	if w.ring != nil {
		dbErr = errors.Join(dbErr, w.ring.close())
	}
	dbErr = errors.Join(dbErr, w.db.Close())
	if w.folderLock != nil {
		if uerr := w.folderLock.Close(); uerr != nil {
			dbErr = errors.Join(dbErr, fmt.Errorf("unlock: %w", uerr))
		}
	}
	if errors.Is(err, ErrFailed) {
		return errors.Join(err, dbErr)
	}
	if dbErr != nil {
		return fmt.Errorf("close local store %s: %w", w.dir, dbErr)
	}
	return nil
}

func (w *localWriter) closeStmts() {
	for _, st := range w.stmts {
		if st != nil {
			_ = st.Close()
		}
	}
}
