package admission

import (
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// localWriter persists a MemoryStore's changes: callers record them (under their activity's lock,
// so in order), and one goroutine commits everything recorded so far in one transaction (group
// commit). A caller waits for the commit that holds the changes its answer depends on; while one
// commit runs, the next batch gathers, with no timer, as in RedisStore's group admission.
type localWriter struct {
	db    *sql.DB
	dir   string
	stmts [localStmtCount]*sql.Stmt

	mu      sync.Mutex
	changed sync.Cond   // broadcast after each commit and on failure
	pending []memChange // recorded, not yet taken by the writer
	spare   []memChange // the previous batch, reused
	err     error       // set once: a failed commit, or the writer stopped
	enq     atomic.Uint64
	dur     atomic.Uint64 // every change up to this sequence number is committed
	failed  atomic.Bool

	wake chan struct{} // capacity 1: changes are pending
	stop chan struct{} // closed by close
	done chan struct{} // closed when the goroutine has ended
}

// The writer's prepared statements.
const (
	stmtDefine = iota
	stmtWin
	stmtRelease
	stmtResult
	stmtGroup
	stmtPending
	stmtNext
	stmtAck
	stmtDead
	stmtDelActivity
	stmtDelWins
	stmtDelReleased
	stmtDelResults
	stmtDelGroups
	stmtDelPending
	stmtDelDead
	localStmtCount
)

var localStmtText = [localStmtCount]string{
	stmtDefine: `INSERT INTO activities (id, stock, lim, start_ms, end_ms, pay_ms, salt) VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET stock = excluded.stock, lim = excluded.lim, start_ms = excluded.start_ms,
		end_ms = excluded.end_ms, pay_ms = excluded.pay_ms, salt = excluded.salt`,
	stmtWin:     `INSERT INTO wins (activity, idx, id, user, qty, request_id, at_ms, remaining) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
	stmtRelease: `INSERT INTO released (activity, id) VALUES (?, ?)`,
	stmtResult: `INSERT INTO results (activity, user, code, reservation_id, order_id, pay_before_ms) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (activity, user) DO UPDATE SET code = excluded.code, reservation_id = excluded.reservation_id,
		order_id = excluded.order_id, pay_before_ms = excluded.pay_before_ms`,
	stmtGroup: `INSERT INTO groups (activity, name, next) VALUES (?, ?, 0)`,
	stmtPending: `INSERT INTO pending (activity, grp, idx, consumer, deliveries, at_ns) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (activity, grp, idx) DO UPDATE SET consumer = excluded.consumer,
		deliveries = excluded.deliveries, at_ns = excluded.at_ns`,
	stmtNext:        `UPDATE groups SET next = ? WHERE activity = ? AND name = ?`,
	stmtAck:         `DELETE FROM pending WHERE activity = ? AND grp = ? AND idx = ?`,
	stmtDead:        `INSERT INTO dead (activity, idx, deliveries, reason) VALUES (?, ?, ?, ?)`,
	stmtDelActivity: `DELETE FROM activities WHERE id = ?`,
	stmtDelWins:     `DELETE FROM wins WHERE activity = ?`,
	stmtDelReleased: `DELETE FROM released WHERE activity = ?`,
	stmtDelResults:  `DELETE FROM results WHERE activity = ?`,
	stmtDelGroups:   `DELETE FROM groups WHERE activity = ?`,
	stmtDelPending:  `DELETE FROM pending WHERE activity = ?`,
	stmtDelDead:     `DELETE FROM dead WHERE activity = ?`,
}

func newLocalWriter(db *sql.DB, dir string) (*localWriter, error) {
	w := &localWriter{
		db: db, dir: dir,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
	w.changed.L = &w.mu
	for i, text := range localStmtText {
		st, err := db.Prepare(text)
		if err != nil {
			w.closeStmts()
			return nil, fmt.Errorf("open local store %s: prepare: %w", dir, err)
		}
		w.stmts[i] = st
	}
	go w.run()
	return w, nil
}

// record implements memJournal. Changes recorded after a failure or after the writer stopped are
// dropped: their callers get the writer's error from wait.
func (w *localWriter) record(c memChange) {
	w.mu.Lock()
	if w.err != nil {
		w.mu.Unlock()
		return
	}
	w.pending = append(w.pending, c)
	w.enq.Add(1)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
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

// wait returns once every change recorded before it was called is committed, or with the
// writer's error if one of them never will be.
func (w *localWriter) wait() error {
	seq := w.enq.Load()
	if w.dur.Load() >= seq {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.dur.Load() < seq && w.err == nil {
		w.changed.Wait()
	}
	if w.dur.Load() >= seq {
		return nil
	}
	return w.err
}

// run is the writer goroutine: one transaction per batch, in the order the changes were recorded.
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
			w.mu.Lock()
			batch, last := w.pending, w.enq.Load()
			w.pending, w.spare = w.spare[:0], nil
			w.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			err := w.commit(batch)
			clear(batch) // let the strings go
			w.mu.Lock()
			w.spare = batch[:0]
			if err != nil {
				w.err = fmt.Errorf("local store %s: %w: commit %d changes: %v", w.dir, ErrLocalFailed, len(batch), err)
				w.failed.Store(true)
				w.pending = nil
				w.changed.Broadcast()
				w.mu.Unlock()
				return
			}
			w.dur.Store(last)
			w.changed.Broadcast()
			w.mu.Unlock()
			if !stopping {
				break
			}
		}
		if stopping {
			w.mu.Lock()
			w.err = fmt.Errorf("local store %s: %w", w.dir, errLocalClosed)
			w.failed.Store(true)
			w.changed.Broadcast()
			w.mu.Unlock()
			return
		}
	}
}

// commit writes one batch in one transaction.
func (w *localWriter) commit(batch []memChange) (err error) {
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
		if err := w.apply(exec, &batch[i]); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// apply writes one change.
func (w *localWriter) apply(exec func(int, ...any) error, c *memChange) error {
	switch c.kind {
	case changeDefine:
		d := c.def
		return exec(stmtDefine, d.ID, d.Stock, d.Limit, d.Start.UnixMilli(), d.End.UnixMilli(), d.PayWithin.Milliseconds(), d.Salt)
	case changeDelete:
		for i := stmtDelActivity; i <= stmtDelDead; i++ {
			if err := exec(i, c.act); err != nil {
				return err
			}
		}
		return nil
	case changeWin:
		e := &c.entry
		if err := exec(stmtWin, c.act, c.idx, e.id, e.user, e.qty, e.requestID, e.atMS, c.remaining); err != nil {
			return err
		}
		return exec(stmtResult, c.act, e.user, "queued", e.id, "", 0)
	case changeRelease:
		return exec(stmtRelease, c.act, c.entry.id)
	case changeResult:
		r := &c.result
		return exec(stmtResult, c.act, c.user, r.Code, r.ReservationID, r.OrderID, r.PayBeforeMS)
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
	}
	return fmt.Errorf("unknown change kind %d", c.kind)
}

// close commits what is pending, stops the goroutine and closes the database.
func (w *localWriter) close() error {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	err := w.err
	w.mu.Unlock()
	w.closeStmts()
	dbErr := w.db.Close()
	if errors.Is(err, ErrLocalFailed) {
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
