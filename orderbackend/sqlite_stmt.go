package orderbackend

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
)

// Prepared statements of the SQLite repository. database/sql prepares a query string again on
// every call and modernc.org/sqlite keeps no statement cache, so the statements the order path runs
// per win or per batch are prepared once: the fixed ones on the *sql.DB at open (Tx.StmtContext
// reuses them on the transaction's connection), the multi-row ones once per row count up to
// sqliteChunk. Why, and the measurements behind exact-count statements: orderbackend/README.md,
// "Statements (SQLite)".
//
// A statement cannot be prepared on the *sql.DB while the writer's only connection is in a
// transaction (preparing waits for a free connection: a deadlock), and the size of the careful
// path's insert is known only inside it. So a count met for the first time runs unprepared, as
// before, and is prepared once its transaction has ended (SQLite.tx).

// sqliteFixedStmts are the statements with one text, prepared at open.
type sqliteFixedStmts struct {
	// On the writer, used in transactions through Tx.StmtContext.
	takeStock, stockLeft, payOrder, paidOutbox, cancelOrder, giveBackStock, releaseOutbox *sql.Stmt
	// On the writer, outside transactions.
	deleteOutbox *sql.Stmt
	// On the readers.
	order, orderByReservation, outbox, stock *sql.Stmt
}

const (
	sqliteTakeStockSQL   = `UPDATE stock SET "left" = "left" - ?2 WHERE activity = ?1 AND "left" >= ?2`
	sqliteStockLeftSQL   = `SELECT "left" FROM stock WHERE activity = ?`
	sqlitePayOrderSQL    = `UPDATE orders SET status = 'paid', paid_at = ?2, payment_ref = ?3 WHERE id = ?1 RETURNING ` + sqliteOrderCols
	sqlitePaidOutboxSQL  = `INSERT INTO outbox (activity, reservation_id, kind, created_at) VALUES (?, ?, 'paid', ?)`
	sqliteCancelOrderSQL = `UPDATE orders SET status = 'cancelled', cancelled_at = ?2
			WHERE id = ?1 AND status = 'pending_payment' RETURNING ` + sqliteOrderCols
	sqliteGiveBackStockSQL      = `UPDATE stock SET "left" = "left" + ? WHERE activity = ?`
	sqliteReleaseOutboxSQL      = `INSERT INTO outbox (activity, reservation_id, kind, created_at) VALUES (?, ?, 'release', ?)`
	sqliteDeleteOutboxSQL       = `DELETE FROM outbox WHERE id = ?`
	sqliteOrderSQL              = `SELECT ` + sqliteOrderCols + ` FROM orders WHERE id = ?`
	sqliteOrderByReservationSQL = `SELECT ` + sqliteOrderCols + ` FROM orders WHERE activity = ? AND reservation_id = ?`
	sqliteOutboxSQL             = `SELECT b.id, b.kind, b.activity, b.reservation_id, o.id, o.user_id, b.created_at
		FROM outbox b JOIN orders o ON o.activity = b.activity AND o.reservation_id = b.reservation_id
		ORDER BY b.id LIMIT ?`
	sqliteStockSQL = `SELECT total, "left" FROM stock WHERE activity = ?`
)

// prepare prepares the fixed statements on w (the writer) and r (the readers).
func (f *sqliteFixedStmts) prepare(ctx context.Context, w, r *sql.DB) error {
	for _, p := range []struct {
		dst   **sql.Stmt
		db    *sql.DB
		query string
	}{
		{&f.takeStock, w, sqliteTakeStockSQL},
		{&f.stockLeft, w, sqliteStockLeftSQL},
		{&f.payOrder, w, sqlitePayOrderSQL},
		{&f.paidOutbox, w, sqlitePaidOutboxSQL},
		{&f.cancelOrder, w, sqliteCancelOrderSQL},
		{&f.giveBackStock, w, sqliteGiveBackStockSQL},
		{&f.releaseOutbox, w, sqliteReleaseOutboxSQL},
		{&f.deleteOutbox, w, sqliteDeleteOutboxSQL},
		{&f.order, r, sqliteOrderSQL},
		{&f.orderByReservation, r, sqliteOrderByReservationSQL},
		{&f.outbox, r, sqliteOutboxSQL},
		{&f.stock, r, sqliteStockSQL},
	} {
		st, err := p.db.PrepareContext(ctx, p.query)
		if err != nil {
			return fmt.Errorf("sqlite: prepare %q: %w", strings.Join(strings.Fields(p.query), " "), err)
		}
		*p.dst = st
	}
	return nil
}

// all lists the statements (nil before prepare).
func (f *sqliteFixedStmts) all() []*sql.Stmt {
	return []*sql.Stmt{f.takeStock, f.stockLeft, f.payOrder, f.paidOutbox, f.cancelOrder, f.giveBackStock,
		f.releaseOutbox, f.deleteOutbox, f.order, f.orderByReservation, f.outbox, f.stock}
}

// close closes the statements prepared.
func (f *sqliteFixedStmts) close() error {
	var errs []error
	for _, st := range f.all() {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	return errors.Join(errs...)
}

// sizedStmts caches, on the writer, the statements of one multi-row query: one statement per row
// count from 1 to sqliteChunk, each prepared after the first transaction that needed it.
type sizedStmts struct {
	db   *sql.DB
	text func(rows int) string // the query for that many rows

	mu      sync.Mutex
	closed  bool
	stmts   [sqliteChunk + 1]*sql.Stmt // by row count
	wanted  [sqliteChunk + 1]bool      // counts run unprepared, to prepare once the writer is free
	pending bool                       // some wanted
}

// stmt returns the statement for rows rows, or nil (noting the count as wanted) if it is not
// prepared yet.
func (c *sizedStmts) stmt(rows int) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.stmts[rows]; st != nil || c.closed {
		return st
	}
	c.wanted[rows], c.pending = true, true
	return nil
}

// execTx runs the statement for rows rows in tx, prepared if it is, by its text otherwise.
func (c *sizedStmts) execTx(ctx context.Context, tx *sql.Tx, rows int, args ...any) (sql.Result, error) {
	if st := c.stmt(rows); st != nil {
		return tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	return tx.ExecContext(ctx, c.text(rows), args...)
}

// queryTx is execTx for a query.
func (c *sizedStmts) queryTx(ctx context.Context, tx *sql.Tx, rows int, args ...any) (*sql.Rows, error) {
	if st := c.stmt(rows); st != nil {
		return tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	return tx.QueryContext(ctx, c.text(rows), args...)
}

// prepareWanted prepares the counts met unprepared. It must not run inside a transaction on the
// writer (preparing waits for the writer's connection). A failure is not the caller's: the count
// keeps running by its text and is tried again after the next transaction that meets it.
func (c *sizedStmts) prepareWanted(ctx context.Context) {
	c.mu.Lock()
	if !c.pending || c.closed {
		c.mu.Unlock()
		return
	}
	var counts []int
	for n, w := range c.wanted {
		if w {
			counts = append(counts, n)
			c.wanted[n] = false
		}
	}
	c.pending = false
	c.mu.Unlock()

	// Not under mu: preparing waits for the writer's connection, whose holder may be in stmt.
	for _, n := range counts {
		st, err := c.db.PrepareContext(ctx, c.text(n))
		if err != nil {
			continue
		}
		c.mu.Lock()
		if c.closed || c.stmts[n] != nil { // closed meanwhile, or prepared by another caller
			c.mu.Unlock()
			_ = st.Close()
			continue
		}
		c.stmts[n] = st
		c.mu.Unlock()
	}
}

// close closes the prepared statements; stmt returns nil and prepareWanted does nothing afterwards.
func (c *sizedStmts) close() error {
	c.mu.Lock()
	c.closed = true
	stmts := c.stmts
	c.stmts = [sqliteChunk + 1]*sql.Stmt{}
	c.mu.Unlock()
	var errs []error
	for _, st := range stmts {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	return errors.Join(errs...)
}

// sqliteInsertOrdersSQL is the insert of rows new orders (10 parameters a row). A reservation whose
// order was archived has no row in orders for ON CONFLICT to meet: NOT EXISTS skips it too, so
// the caller's row count sends it to the careful path, which finds the archived order.
func sqliteInsertOrdersSQL(rows int) string {
	const row = `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	return `INSERT INTO orders (id, reservation_id, activity, user_id, qty, status, created_at, expires_at, amount, currency, title)
			SELECT column1, column2, column3, column4, column5, 'pending_payment', column6, column7, column8, column9, column10
			FROM (VALUES ` + row + strings.Repeat(", "+row, rows-1) + `) AS v
			WHERE NOT EXISTS (SELECT 1 FROM orders_archive a WHERE a.activity = v.column3 AND a.reservation_id = v.column2)
			ON CONFLICT (activity, reservation_id) DO NOTHING`
}

// sqliteExistingSQL reads the orders of rows reservations of one activity (the activity, then the
// reservation ids), archived ones included: a win delivered again after its sale was archived
// finds its order there.
func sqliteExistingSQL(rows int) string {
	// Numbered parameters: both halves name the same ones.
	var in strings.Builder
	in.WriteString("(?2")
	for i := 3; i <= rows+1; i++ {
		fmt.Fprintf(&in, ", ?%d", i)
	}
	in.WriteString(")")
	return `SELECT ` + sqliteOrderCols + ` FROM orders WHERE activity = ?1 AND reservation_id IN ` + in.String() + `
			UNION ALL SELECT ` + sqliteOrderCols + ` FROM orders_archive WHERE activity = ?1 AND reservation_id IN ` + in.String()
}
