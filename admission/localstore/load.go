package localstore

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// loadLocal rebuilds mem's state from the database: what a restart replays.
func loadLocal(db *sql.DB, mem *Memory) error {
	acts := map[string]*memActivity{}
	type lineState struct {
		drawn    bool
		interval float64
		session  int64
	}
	lineStates := map[string]lineState{}
	err := eachRow(db, `SELECT id, stock, lim, start_ms, end_ms, pay_ms, salt, line_drawn, line_interval_ms, line_session_ms FROM activities`, func(rows *sql.Rows) error {
		var d admission.Activity
		var start, end, pay int64
		var ls lineState
		if err := rows.Scan(&d.ID, &d.Stock, &d.Limit, &start, &end, &pay, &d.Salt, &ls.drawn, &ls.interval, &ls.session); err != nil {
			return err
		}
		d.Start, d.End, d.PayWithin = time.UnixMilli(start), time.UnixMilli(end), time.Duration(pay)*time.Millisecond
		acts[d.ID] = newMemActivity(d)
		lineStates[d.ID] = ls
		return nil
	})
	if err != nil {
		return fmt.Errorf("activities: %w", err)
	}
	find := func(table, id string) (*memActivity, error) {
		if a := acts[id]; a != nil {
			return a, nil
		}
		return nil, fmt.Errorf("%s: a row of activity %q, which is not defined", table, id)
	}

	// In seq order each activity's wins come in index order (the writer checked it).
	win := func(w *packedWin) error {
		a, err := find("wins", w.act)
		if err != nil {
			return err
		}
		idx, e := w.idx, w.entry
		if idx != a.entries.len() {
			return fmt.Errorf("wins of %s: entry %d follows %d", w.act, idx, a.entries.len()-1)
		}
		ms, seq, ok := parseEntryID(e.id)
		if !ok || ms < a.lastMS || (ms == a.lastMS && idx > 0 && seq <= a.seq) {
			return fmt.Errorf("wins of %s: entry id %q out of order", w.act, e.id)
		}
		a.lastMS, a.seq = ms, seq
		e.idMS, e.idSeq = ms, seq
		a.entries.add(e)
		u := a.user(e.user)
		a.addWin(u, idx, w.remaining) // its record is folded below
		a.take(u, e.qty)
		a.stock -= e.qty
		return nil
	}
	err = eachRow(db, `SELECT seq, n, data FROM win_log ORDER BY seq`, func(rows *sql.Rows) error {
		var seq int64
		var n int
		var data sql.RawBytes
		if err := rows.Scan(&seq, &n, &data); err != nil {
			return err
		}
		if err := decodeWins(data, n, win); err != nil {
			return fmt.Errorf("win_log row %d: %w", seq, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("wins: %w", err)
	}

	err = eachRow(db, `SELECT activity, id FROM released`, func(rows *sql.Rows) error {
		var act, id string
		if err := rows.Scan(&act, &id); err != nil {
			return err
		}
		a, err := find("released", act)
		if err != nil {
			return err
		}
		i, ok := a.entryIndex(id)
		if !ok {
			return fmt.Errorf("released %s/%s: no such win", act, id)
		}
		e := a.entries.at(i)
		a.released[id] = struct{}{}
		a.stock += e.qty
		a.give(e.user, e.qty)
		return nil
	})
	if err != nil {
		return fmt.Errorf("released: %w", err)
	}

	// A user's results row holds the folded records as of after_wins wins of the activity; the
	// user's wins from then on are folded in again, in order, as Admit folded them.
	after := map[*memActivity]map[string]int{}
	err = eachRow(db, `SELECT activity, user, code, reservation_id, order_id, pay_before_ms, after_wins, reservations FROM results`, func(rows *sql.Rows) error {
		var act, user, resvs string
		var r admission.Result
		var n int
		if err := rows.Scan(&act, &user, &r.Code, &r.ReservationID, &r.OrderID, &r.PayBeforeMS, &n, &resvs); err != nil {
			return err
		}
		a, err := find("results", act)
		if err != nil {
			return err
		}
		if n < 0 || n > a.entries.len() {
			return fmt.Errorf("result %s/%s: set after %d wins of %d", act, user, n, a.entries.len())
		}
		if resvs != "" {
			if err := json.Unmarshal([]byte(resvs), &r.Reservations); err != nil {
				return fmt.Errorf("result %s/%s: reservations: %w", act, user, err)
			}
		}
		var list []admission.Result
		if resvs != "" {
			list = r.Reservations
		}
		r.Reservations = nil
		a.setResult(a.user(user), r, list)
		if after[a] == nil {
			after[a] = map[string]int{}
		}
		after[a][user] = n
		return nil
	})
	if err != nil {
		return fmt.Errorf("results: %w", err)
	}
	for _, a := range acts {
		for i, e := range a.entries.all() {
			n, hasRow := after[a][e.user]
			if hasRow && i < n {
				continue
			}
			u := a.user(e.user)
			// A user's one win is its whole record already (addWin), unless the user's results
			// row, set before the win, took the memRecord: the win is then folded after it, as
			// Admit folded it.
			if !hasRow && u.simple() && u.first.entry == i {
				continue
			}
			a.fold(u, admission.Result{Code: "queued", ReservationID: e.id}, true)
		}
	}

	err = eachRow(db, `SELECT activity, name, next FROM groups`, func(rows *sql.Rows) error {
		var act, name string
		var next int
		if err := rows.Scan(&act, &name, &next); err != nil {
			return err
		}
		a, err := find("groups", act)
		if err != nil {
			return err
		}
		if next < 0 || next > a.entries.len() {
			return fmt.Errorf("group %s/%s: next entry %d of %d", act, name, next, a.entries.len())
		}
		a.groups[name] = &memGroup{next: next, pending: make(map[int]*memPending)}
		return nil
	})
	if err != nil {
		return fmt.Errorf("groups: %w", err)
	}

	err = eachRow(db, `SELECT activity, grp, idx, consumer, deliveries, at_ns FROM pending`, func(rows *sql.Rows) error {
		var act, grp string
		var idx int
		var p memPending
		var at int64
		if err := rows.Scan(&act, &grp, &idx, &p.consumer, &p.deliveries, &at); err != nil {
			return err
		}
		a, err := find("pending", act)
		if err != nil {
			return err
		}
		g := a.groups[grp]
		if g == nil || idx < 0 || idx >= g.next {
			return fmt.Errorf("pending %s/%s: entry %d was never delivered", act, grp, idx)
		}
		p.at = time.Unix(0, at)
		g.pending[idx] = &p
		return nil
	})
	if err != nil {
		return fmt.Errorf("pending: %w", err)
	}

	err = eachRow(db, `SELECT activity, idx, deliveries, reason FROM dead ORDER BY rowid`, func(rows *sql.Rows) error {
		var act, reason string
		var idx int
		var deliveries int64
		if err := rows.Scan(&act, &idx, &deliveries, &reason); err != nil {
			return err
		}
		a, err := find("dead", act)
		if err != nil {
			return err
		}
		if idx < 0 || idx >= a.entries.len() {
			return fmt.Errorf("dead %s: no entry %d", act, idx)
		}
		w := a.win(idx, deliveries)
		w.Reason = reason
		a.dead = append(a.dead, w)
		return nil
	})
	if err != nil {
		return fmt.Errorf("dead letters: %w", err)
	}

	lines := map[*memActivity][]lineRow{}
	err = eachRow(db, `SELECT activity, user, early, at, interval_ms FROM line`, func(rows *sql.Rows) error {
		var act string
		var r lineRow
		if err := rows.Scan(&act, &r.user, &r.early, &r.at, &r.interval); err != nil {
			return err
		}
		a, err := find("line", act)
		if err != nil {
			return err
		}
		lines[a] = append(lines[a], r)
		return nil
	})
	if err != nil {
		return fmt.Errorf("line: %w", err)
	}
	for id, a := range acts {
		ls := lineStates[id]
		if err := a.line.load(lines[a], ls.drawn, ls.interval, ls.session); err != nil {
			return fmt.Errorf("line of %s: %w", id, err)
		}
	}

	// A buyer above the limit is no damage: a forced redefinition may lower the limit, and its
	// holders keep what they hold.
	for id, a := range acts {
		if a.stock < 0 || a.stock > a.def.Stock {
			return fmt.Errorf("activity %s: %d left of %d after the wins and releases", id, a.stock, a.def.Stock)
		}
	}
	mem.acts.Store(&acts)
	return nil
}

// eachRow runs query and calls fn for every row.
func eachRow(db *sql.DB, query string, fn func(*sql.Rows) error) error {
	return scanRows(db.Query, query, fn)
}

// eachTxRow is eachRow inside a transaction.
func eachTxRow(tx *sql.Tx, query string, fn func(*sql.Rows) error) error {
	return scanRows(tx.Query, query, fn)
}

func scanRows(q func(string, ...any) (*sql.Rows, error), query string, fn func(*sql.Rows) error) error {
	rows, err := q(query)
	if err != nil {
		return err
	}
	for rows.Next() {
		if err := fn(rows); err != nil {
			_ = rows.Close()
			return err
		}
	}
	return errors.Join(rows.Err(), rows.Close())
}

// entryCounts returns how many wins each activity holds: the writer's next index for each.
func (s *Memory) entryCounts() map[string]int {
	acts := *s.acts.Load()
	next := make(map[string]int, len(acts))
	for id, a := range acts {
		a.mu.Lock()
		next[id] = a.entries.len()
		a.mu.Unlock()
	}
	return next
}
