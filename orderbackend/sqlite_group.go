package orderbackend

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
)

// Group commit of SQLite's CreateOrders calls.
//
// SQLite has one writer connection, so concurrent CreateOrders calls (one consumer per activity)
// wait for each other anyway; each paid a whole transaction and commit (a WAL write) for the one
// or two wins a consumer reads at a time during a sale. Now a call that finds the writer idle runs
// at once, alone, as before (no timer: a lone caller never waits). Calls that arrive while a
// transaction is in flight wait in line; when it ends, the calls in line (up to maxGroupWins wins,
// in arrival order) go together in the next transaction, in which each call's wins are decided
// exactly as in a transaction of its own that ran after the calls before it: the outcomes are
// those of running the calls one after another in line order.
//
// The line hands the writer on: the goroutine whose transaction ended takes the next group out of
// the line and gives it to that group's first caller, which runs it and answers the others. So no
// caller runs a transaction that is not partly its own, and a caller returns as soon as its own
// answer is known.
//
// A shared transaction that fails as a whole (one call's poison row, say) is not anybody's answer:
// each of its calls then runs alone, in line order, and gets exactly what it would have got alone.
// Only a failure marked ErrUnavailable (the database busy or failing, which a call alone would
// meet too) is every call's answer at once, so that a busy database is not waited out once per
// call. A caller whose ctx ends while it waits in line leaves the line and nothing is written for
// it; once its call is taken into a transaction, that transaction runs and the caller gets its
// answer. A shared transaction is canceled only when every caller in it has gone.
//
// Only CreateOrders waits in this line. The other writes (Pay, Cancel, CancelExpired, EnsureStock,
// DeleteOutbox) take the writer connection directly, between two transactions of the line, as
// they did before: they are rare next to order creation, each has its own answers (a Pay that
// loses to the window), and the line does not change what they see, because every transaction on
// the one connection is exclusive and reads the stock and orders it decides on.

// maxGroupWins bounds the wins one shared transaction carries: the commit stays short, so the
// other writes and the next calls in line do not wait long behind it.
const maxGroupWins = 512

// createCall is one CreateOrders call.
type createCall struct {
	ctx context.Context
	op  string     // the call's error context, as createAlone uses it
	act string     // the batch's one activity
	ns  []NewOrder // normalized

	outs []CreateOutcome
	err  error

	// Set only for a call that waits in line.
	lead chan []*createCall // receives the group this call's goroutine is to run
	done chan struct{}      // closed once outs and err are set
	sent bool               // under writeLine.mu: taken into a transaction, no longer withdrawable
}

// writeLine is the line of CreateOrders calls waiting for the writer connection.
type writeLine struct {
	mu    sync.Mutex
	busy  bool          // a goroutine holds the writer's turn: it is running a group or handing it on
	calls []*createCall // waiting, in arrival order

	// off runs every call alone, straight on the connection, as before group commit; only for
	// measuring the difference (bench_test.go).
	off bool
}

// enqueue runs c at once if the writer is idle, and otherwise waits in line for a group.
func (s *SQLite) enqueue(c *createCall) ([]CreateOutcome, error) {
	l := &s.line
	l.mu.Lock()
	if !l.busy {
		l.busy = true
		l.mu.Unlock()
		s.runGroup([]*createCall{c})
		return c.outs, c.err
	}
	c.lead, c.done = make(chan []*createCall, 1), make(chan struct{})
	l.calls = append(l.calls, c)
	l.mu.Unlock()

	select {
	case <-c.done:
		return c.outs, c.err
	case g := <-c.lead:
		s.runGroup(g)
		return c.outs, c.err
	case <-c.ctx.Done():
	}
	l.mu.Lock()
	if !c.sent {
		if i := slices.Index(l.calls, c); i >= 0 {
			l.calls = slices.Delete(l.calls, i, i+1)
		}
		l.mu.Unlock()
		// What a call alone gets when its ctx ends before its transaction began.
		return nil, sqliteErr(c.op, c.ctx.Err())
	}
	l.mu.Unlock()
	// Taken into a transaction: it runs, and this call gets its real answer.
	select {
	case <-c.done:
	case g := <-c.lead:
		s.runGroup(g)
	}
	return c.outs, c.err
}

// runGroup runs a group's transaction (the caller holds the writer's turn), answers its calls and
// hands the turn on.
func (s *SQLite) runGroup(g []*createCall) {
	if len(g) == 1 {
		c := g[0]
		c.outs, c.err = s.createAlone(c.ctx, c.op, c.act, c.ns)
	} else {
		s.createShared(g)
	}
	for _, c := range g {
		if c.done != nil {
			close(c.done)
		}
	}
	s.handOff()
}

// handOff gives the writer's turn to the next group in line, or frees it.
func (s *SQLite) handOff() {
	l := &s.line
	l.mu.Lock()
	if len(l.calls) == 0 {
		l.busy = false
		l.mu.Unlock()
		return
	}
	// In arrival order, as many calls as fit (at least one, however large).
	n, wins := 1, len(l.calls[0].ns)
	for n < len(l.calls) && wins+len(l.calls[n].ns) <= maxGroupWins {
		wins += len(l.calls[n].ns)
		n++
	}
	g := slices.Clone(l.calls[:n])
	l.calls = slices.Delete(l.calls, 0, n)
	for _, c := range g {
		c.sent = true
	}
	l.mu.Unlock()
	g[0].lead <- g
}

// createShared runs two or more calls in one transaction and sets every call's answer.
func (s *SQLite) createShared(g []*createCall) {
	ctx, stop := untilAllDone(g)
	defer stop()
	err := s.sharedTx(ctx, g)
	switch {
	case err == nil:
		wins := 0
		for _, c := range g {
			wins += len(c.ns)
		}
		s.stats.add(len(g), wins)
		return
	case sqliteUnavailable(err):
		// The database, not a call, failed: alone, each would have met it too.
		for _, c := range g {
			c.outs, c.err = nil, sqliteErr(c.op, err)
		}
		return
	}
	// One call's failure (or a database that changed under three plans): each call's answer is
	// its own, from a transaction of its own.
	for _, c := range g {
		c.outs, c.err = s.createAlone(c.ctx, c.op, c.act, c.ns)
	}
}

// untilAllDone returns a context that is canceled once every call's ctx is done: a shared
// transaction belongs to all its callers, so one caller giving up must not roll back the others'.
func untilAllDone(g []*createCall) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var live atomic.Int64
	live.Store(int64(len(g)))
	stops := make([]func() bool, len(g))
	for i, c := range g {
		stops[i] = context.AfterFunc(c.ctx, func() {
			if live.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// groupTake is the stock one activity's wins take in a shared transaction.
type groupTake struct {
	act  string
	take int64
}

// groupFastTake is fastTake for a group: the summed qty of each activity (in order of first
// appearance), if every call is a fast-path batch and no reservation appears twice within an
// activity across the calls.
func groupFastTake(g []*createCall) ([]groupTake, bool) {
	type key struct{ act, resv string }
	seen := make(map[key]struct{})
	var takes []groupTake
	for _, c := range g {
		i := slices.IndexFunc(takes, func(t groupTake) bool { return t.act == c.act })
		if i < 0 {
			takes = append(takes, groupTake{act: c.act})
			i = len(takes) - 1
		}
		for _, n := range c.ns {
			k := key{c.act, n.ReservationID}
			if _, dup := seen[k]; dup {
				return nil, false
			}
			seen[k] = struct{}{}
			takes[i].take += n.Qty
		}
	}
	return takes, true
}

// groupState is what a shared transaction's careful path knows of one activity.
type groupState struct {
	hasStock bool
	left     int64
	existing map[string]Order
	take     int64
}

// sharedTx runs a group's calls (one, for createAlone) in one transaction, with two paths. Fast path:
// each activity's summed stock taken by one guarded update, every call's orders inserted by one
// statement; if each activity's sum fits, every prefix of the line fits, so every win is new and
// created, as one call after another would make it. Careful path: each activity's stock row and
// the group's existing orders read, every call planned in line order on what the calls before it
// left (planBatch), then each activity's summed stock taken and all new orders inserted. It sets
// every call's outs on success; it returns errReplan when the careful path met a changed database
// batchAttempts times.
func (s *SQLite) sharedTx(ctx context.Context, g []*createCall) error {
	if takes, ok := groupFastTake(g); ok {
		all := g[0].ns // a call alone (createAlone) inserts its own slice
		if len(g) > 1 {
			all = nil
			for _, c := range g {
				all = append(all, c.ns...)
			}
		}
		err := s.tx(ctx, func(tx *sql.Tx) error {
			for _, t := range takes {
				if err := s.takeStock(ctx, tx, t.act, t.take); err != nil {
					return err
				}
			}
			return s.insertOrders(ctx, tx, all)
		})
		if err == nil {
			for _, c := range g {
				c.outs = allCreated(c.ns)
			}
			return nil
		}
		if !errors.Is(err, errReplan) {
			return err
		}
	}
	// The activities in order of first appearance, each with its calls' wins.
	var (
		acts  []string
		byAct = map[string][]NewOrder{}
	)
	for _, c := range g {
		if _, ok := byAct[c.act]; !ok {
			acts = append(acts, c.act)
		}
		byAct[c.act] = append(byAct[c.act], c.ns...)
	}
	plans := make([]batchPlan, len(g))
	for attempt := 1; ; attempt++ {
		err := s.tx(ctx, func(tx *sql.Tx) error {
			states := make(map[string]*groupState, len(acts))
			for _, act := range acts {
				st := &groupState{hasStock: true}
				err := tx.StmtContext(ctx, s.fixed.stockLeft).QueryRowContext(ctx, act).Scan(&st.left)
				if errors.Is(err, sql.ErrNoRows) {
					st.hasStock = false
				} else if err != nil {
					return err
				}
				if st.existing, err = s.existingOrders(ctx, tx, act, byAct[act]); err != nil {
					return err
				}
				states[act] = st
			}
			var inserts []NewOrder
			for i, c := range g {
				st := states[c.act]
				// planBatch adds the orders it plans to existing, so later calls find them.
				plans[i] = planBatch("sqlite", c.ns, st.hasStock, st.left, st.existing)
				st.left -= plans[i].take
				st.take += plans[i].take
				inserts = append(inserts, plans[i].inserts...)
			}
			if len(inserts) == 0 {
				return nil
			}
			for _, act := range acts {
				if st := states[act]; st.take > 0 {
					if err := s.takeStock(ctx, tx, act, st.take); err != nil {
						return err
					}
				}
			}
			return s.insertOrders(ctx, tx, inserts)
		})
		if err == nil {
			for i, c := range g {
				c.outs = plans[i].outs
			}
			return nil
		}
		if !errors.Is(err, errReplan) || attempt == batchAttempts {
			return err
		}
	}
}

// txCounter counts the transactions in which a repository created orders.
type txCounter struct{ txs, calls, wins atomic.Int64 }

// add counts one committed transaction that answered calls CreateOrders calls with wins wins.
func (c *txCounter) add(calls, wins int) {
	c.txs.Add(1)
	c.calls.Add(int64(calls))
	c.wins.Add(int64(wins))
}

func (c *txCounter) snapshot() TxStats {
	return TxStats{Transactions: c.txs.Load(), Calls: c.calls.Load(), Wins: c.wins.Load()}
}

// TxStats implements TxStatsReporter.
func (s *SQLite) TxStats() TxStats { return s.stats.snapshot() }
