package orderbackend

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// SQLite is the SQLite Repository (modernc.org/sqlite, no cgo), the embedded default for one node.
// The file is in WAL mode; all writes go through a single connection, so write transactions never
// contend with each other inside the process, and reads use their own pool.
type SQLite struct {
	w *sql.DB // one connection: the only writer
	r *sql.DB // readers

	line  writeLine // CreateOrders calls waiting for the writer, which share a transaction (group commit)
	stats txCounter // the order transactions CreateOrders committed

	// Prepared statements (sqlite_stmt.go).
	fixed    sqliteFixedStmts
	insert   sizedStmts // sqliteInsertOrdersSQL
	existing sizedStmts // sqliteExistingSQL
}

var _ Repository = (*SQLite)(nil)

// SQLiteOptions tunes NewSQLiteOptions.
type SQLiteOptions struct {
	// SyncFull flushes every commit to the device (synchronous=FULL), so that an order survives a
	// power loss once the win it came from was acknowledged. The default (NORMAL) hands commits to
	// the OS, which a crash of the process does not lose. Set it when the store flushes too (the
	// gateway's store local with fsync always): otherwise a power loss could keep the store's
	// acknowledgement of a win and lose its order.
	SyncFull bool
}

// NewSQLite opens (creating if needed) the database file at path and applies the migrations.
func NewSQLite(ctx context.Context, path string) (*SQLite, error) {
	return NewSQLiteOptions(ctx, path, SQLiteOptions{})
}

// NewSQLiteOptions is NewSQLite with options.
func NewSQLiteOptions(ctx context.Context, path string, opts SQLiteOptions) (*SQLite, error) {
	if path == "" || strings.ContainsRune(path, '?') {
		return nil, fmt.Errorf("sqlite: bad database path %q", path)
	}
	// _txlock=immediate: a write transaction takes the write lock at BEGIN, so it never fails
	// half-way with SQLITE_BUSY when another process (a reconcile run) holds a read.
	const common = "_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)"
	sync := "NORMAL"
	if opts.SyncFull {
		sync = "FULL"
	}
	w, err := sql.Open("sqlite", path+"?"+common+"&_txlock=immediate&_pragma=journal_mode(WAL)&_pragma=synchronous("+sync+")")
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetConnMaxIdleTime(0)
	s := &SQLite{w: w}
	if err := s.migrate(ctx); err != nil {
		_ = w.Close()
		return nil, err
	}
	// Opened after the writer switched the file to WAL, which is persistent.
	s.r, err = sql.Open("sqlite", path+"?"+common+"&_query_only=1")
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	s.r.SetMaxOpenConns(4)
	// Keep every reader open (the default keeps 2 idle): a connection closed and opened again
	// would prepare its statements again.
	s.r.SetMaxIdleConns(4)
	s.insert = sizedStmts{db: w, text: sqliteInsertOrdersSQL}
	s.existing = sizedStmts{db: w, text: sqliteExistingSQL}
	if err := s.fixed.prepare(ctx, w, s.r); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	return s, nil
}

func (s *SQLite) migrate(ctx context.Context) error {
	ms, err := migrations("sqlite")
	if err != nil {
		return err
	}
	for _, m := range ms {
		err := s.tx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
				version TEXT PRIMARY KEY, applied_at INTEGER NOT NULL)`); err != nil {
				return err
			}
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations WHERE version = ?`, m.version).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return nil
			}
			if _, err := tx.ExecContext(ctx, m.sql); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`,
				m.version, time.Now().UnixMilli())
			return err
		})
		if err != nil {
			return sqliteErr("sqlite: migration "+m.version, err)
		}
	}
	return nil
}

// Close closes the prepared statements and both pools.
func (s *SQLite) Close() error {
	return errors.Join(s.insert.close(), s.existing.close(), s.fixed.close(), s.r.Close(), s.w.Close())
}

// tx runs fn in a write transaction, committing if it returns nil. Afterwards, with the writer's
// connection free again, it prepares the multi-row statements fn ran unprepared (sqlite_stmt.go).
func (s *SQLite) tx(ctx context.Context, fn func(*sql.Tx) error) error {
	defer s.insert.prepareWanted(ctx)
	defer s.existing.prepareWanted(ctx)
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// sqliteErr wraps err with op, marking lock contention and I/O trouble with ErrUnavailable.
func sqliteErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if sqliteUnavailable(err) {
		return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// sqliteUnavailable reports whether err is lock contention or I/O trouble, which may pass.
func sqliteUnavailable(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff { // primary result code
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL, sqlite3.SQLITE_CANTOPEN:
			return true
		}
	}
	return false
}

const sqliteOrderCols = `id, reservation_id, activity, user_id, qty, status, created_at, expires_at, paid_at, cancelled_at, payment_ref, amount, currency, title`

type scanner interface{ Scan(dest ...any) error }

func scanSQLiteOrder(row scanner) (Order, error) {
	var (
		o                   Order
		status              string
		created, expires    int64
		paidAt, cancelledAt sql.NullInt64
		ref                 sql.NullString
	)
	if err := row.Scan(&o.ID, &o.ReservationID, &o.Activity, &o.User, &o.Qty, &status, &created, &expires,
		&paidAt, &cancelledAt, &ref, &o.Amount.Amount, &o.Amount.Currency, &o.Title); err != nil {
		return Order{}, err
	}
	o.Status = Status(status)
	o.CreatedAt, o.ExpiresAt = time.UnixMilli(created), time.UnixMilli(expires)
	if paidAt.Valid {
		o.PaidAt = time.UnixMilli(paidAt.Int64)
	}
	if cancelledAt.Valid {
		o.CancelledAt = time.UnixMilli(cancelledAt.Int64)
	}
	o.PaymentRef = ref.String
	return o, nil
}

// EnsureStock implements Repository.
func (s *SQLite) EnsureStock(ctx context.Context, activity string, total int64) error {
	_, err := s.w.ExecContext(ctx, `INSERT INTO stock (activity, total, "left") VALUES (?1, ?2, ?2)
		ON CONFLICT (activity) DO UPDATE
		SET total = excluded.total, "left" = stock."left" + (excluded.total - stock.total)
		WHERE stock.total <> excluded.total`, activity, total)
	return sqliteErr("sqlite: ensure stock "+activity, err)
}

// CreateOrder implements Repository: a batch of one.
func (s *SQLite) CreateOrder(ctx context.Context, n NewOrder) (Order, bool, error) {
	return firstOutcome(s.CreateOrders(ctx, []NewOrder{n}))
}

// sqliteChunk bounds the rows of one multi-row statement (10 parameters a row, well within
// SQLite's 32766), and so the row counts that have a prepared statement (sqlite_stmt.go): a
// consumer's whole read batch (64 wins by default) is one statement, a larger shared transaction
// inserts in chunks.
const sqliteChunk = 64

// CreateOrders implements Repository. Calls made while the writer is busy with another call's
// transaction wait in line and then share one transaction (group commit, see sqlite_group.go);
// a call that finds the writer idle runs at once, alone (createAlone).
func (s *SQLite) CreateOrders(ctx context.Context, ns []NewOrder) ([]CreateOutcome, error) {
	if len(ns) == 0 {
		return nil, nil
	}
	op := fmt.Sprintf("sqlite: create %d orders for reservation %s", len(ns), ns[0].ReservationID)
	if len(ns) == 1 {
		op = "sqlite: create order for reservation " + ns[0].ReservationID
	}
	act, err := batchActivity(op, ns)
	if err != nil {
		return nil, err
	}
	c := &createCall{ctx: ctx, op: op, act: act, ns: normalizedAll(ns)}
	if s.line.off {
		c.outs, c.err = s.createAlone(c.ctx, c.op, c.act, c.ns)
		return c.outs, c.err
	}
	return s.enqueue(c)
}

// createAlone is one CreateOrders call in a transaction of its own; ns is normalized. It is
// sharedTx for a group of one, so that a call alone and a call in a group are decided by the same
// code: the fast path (see fastTake) is the guarded update of the summed stock and multi-row
// inserts, the two statements a single order always took; the careful path reads the stock row
// and the batch's existing orders, decides every win in order (planBatch), and writes the new
// orders and their summed stock. The write transaction is exclusive (BEGIN IMMEDIATE), so nothing
// changes between its reads and its writes.
func (s *SQLite) createAlone(ctx context.Context, op, act string, ns []NewOrder) ([]CreateOutcome, error) {
	c := &createCall{ctx: ctx, op: op, act: act, ns: ns}
	err := s.sharedTx(ctx, []*createCall{c})
	switch {
	case err == nil:
		s.stats.add(1, len(ns))
		return c.outs, nil
	case errors.Is(err, errReplan):
		return nil, fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err)
	}
	return nil, sqliteErr(op, err)
}

// takeStock takes qty items with the stock guard; errReplan when the guard refuses (or the
// activity has no stock row).
func (s *SQLite) takeStock(ctx context.Context, tx *sql.Tx, act string, qty int64) error {
	res, err := tx.StmtContext(ctx, s.fixed.takeStock).ExecContext(ctx, act, qty)
	if err != nil {
		return err
	}
	if k, err := res.RowsAffected(); err != nil {
		return err
	} else if k != 1 {
		return errReplan
	}
	return nil
}

// existingOrders reads the orders the batch's reservations already have, by reservation id.
func (s *SQLite) existingOrders(ctx context.Context, tx *sql.Tx, act string, ns []NewOrder) (map[string]Order, error) {
	existing := make(map[string]Order, len(ns))
	for lo := 0; lo < len(ns); lo += sqliteChunk {
		chunk := ns[lo:min(lo+sqliteChunk, len(ns))]
		args := make([]any, 0, len(chunk)+1)
		args = append(args, act)
		for _, n := range chunk {
			args = append(args, n.ReservationID)
		}
		rows, err := s.existing.queryTx(ctx, tx, len(chunk), args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			o, err := scanSQLiteOrder(rows)
			if err != nil {
				_ = rows.Close()
				return nil, err
			}
			existing[o.ReservationID] = o
		}
		_ = rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return existing, nil
}

// insertOrders inserts planned new orders. ON CONFLICT DO NOTHING and the count turn a
// reservation that already has an order into errReplan instead of a failed statement.
func (s *SQLite) insertOrders(ctx context.Context, tx *sql.Tx, ins []NewOrder) error {
	for lo := 0; lo < len(ins); lo += sqliteChunk {
		chunk := ins[lo:min(lo+sqliteChunk, len(ins))]
		args := make([]any, 0, 10*len(chunk))
		for _, n := range chunk {
			args = append(args, n.ID, n.ReservationID, n.Activity, n.User, n.Qty, n.CreatedAt.UnixMilli(), n.ExpiresAt.UnixMilli(),
				n.Amount.Amount, n.Amount.Currency, n.Title)
		}
		res, err := s.insert.execTx(ctx, tx, len(chunk), args...)
		if err != nil {
			return err
		}
		if k, err := res.RowsAffected(); err != nil {
			return err
		} else if k != int64(len(chunk)) {
			return errReplan
		}
	}
	return nil
}

// Order implements Repository.
func (s *SQLite) Order(ctx context.Context, id string) (Order, error) {
	o, err := scanSQLiteOrder(s.fixed.order.QueryRowContext(ctx, id))
	if errors.Is(err, sql.ErrNoRows) {
		// An archived sale's order (Archive) is read from the archive.
		o, err = scanSQLiteOrder(s.r.QueryRowContext(ctx, `SELECT `+sqliteOrderCols+` FROM orders_archive WHERE id = ?`, id))
	}
	if errors.Is(err, sql.ErrNoRows) {
		return Order{}, fmt.Errorf("order %s: %w", id, ErrNotFound)
	}
	return o, sqliteErr("sqlite: order "+id, err)
}

// OrderByReservation implements Repository.
func (s *SQLite) OrderByReservation(ctx context.Context, activity, reservationID string) (Order, error) {
	o, err := scanSQLiteOrder(s.fixed.orderByReservation.QueryRowContext(ctx, activity, reservationID))
	if errors.Is(err, sql.ErrNoRows) {
		o, err = scanSQLiteOrder(s.r.QueryRowContext(ctx, `SELECT `+sqliteOrderCols+` FROM orders_archive
			WHERE activity = ? AND reservation_id = ?`, activity, reservationID))
	}
	if errors.Is(err, sql.ErrNoRows) {
		return Order{}, fmt.Errorf("reservation %s: %w", reservationID, ErrNotFound)
	}
	return o, sqliteErr("sqlite: order of reservation "+reservationID, err)
}

// Cancel implements Repository.
func (s *SQLite) Cancel(ctx context.Context, id string, now time.Time) (Order, error) {
	var o Order
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var err error
		o, err = scanSQLiteOrder(tx.StmtContext(ctx, s.fixed.cancelOrder).QueryRowContext(ctx, id, now.UnixMilli()))
		if err != nil {
			return err
		}
		return s.giveBack(ctx, tx, []Order{o}, now)
	})
	if errors.Is(err, sql.ErrNoRows) {
		o, err := s.Order(ctx, id)
		if err != nil {
			return Order{}, err
		}
		if o.Status == StatusCancelled {
			return o, nil
		}
		return o, fmt.Errorf("cancel order %s: %w", id, ErrNotPending)
	}
	return o, sqliteErr("sqlite: cancel order "+id, err)
}

// CancelExpired implements Repository. The write transaction is exclusive, so the selected rows
// cannot change before they are updated.
func (s *SQLite) CancelExpired(ctx context.Context, now time.Time, limit int) ([]Order, error) {
	var out []Order
	err := s.tx(ctx, func(tx *sql.Tx) error {
		out = out[:0]
		rows, err := tx.QueryContext(ctx, `SELECT `+sqliteOrderCols+` FROM orders
			WHERE status = 'pending_payment' AND expires_at <= ? ORDER BY expires_at LIMIT ?`, now.UnixMilli(), limit)
		if err != nil {
			return err
		}
		for rows.Next() {
			o, err := scanSQLiteOrder(rows)
			if err != nil {
				_ = rows.Close()
				return err
			}
			out = append(out, o)
		}
		_ = rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for i := range out {
			if _, err := tx.ExecContext(ctx, `UPDATE orders SET status = 'cancelled', cancelled_at = ? WHERE id = ?`,
				now.UnixMilli(), out[i].ID); err != nil {
				return err
			}
			out[i].Status, out[i].CancelledAt = StatusCancelled, time.UnixMilli(now.UnixMilli())
		}
		return s.giveBack(ctx, tx, out, now)
	})
	if err != nil {
		return nil, sqliteErr("sqlite: cancel expired orders", err)
	}
	return out, nil
}

// giveBack returns cancelled orders' items to the database stock and queues their release in the
// store, inside the cancelling transaction.
func (s *SQLite) giveBack(ctx context.Context, tx *sql.Tx, orders []Order, now time.Time) error {
	if len(orders) == 0 {
		return nil
	}
	stock, outbox := tx.StmtContext(ctx, s.fixed.giveBackStock), tx.StmtContext(ctx, s.fixed.releaseOutbox)
	for _, o := range orders {
		if _, err := stock.ExecContext(ctx, o.Qty, o.Activity); err != nil {
			return err
		}
		if _, err := outbox.ExecContext(ctx, o.Activity, o.ReservationID, now.UnixMilli()); err != nil {
			return err
		}
	}
	return nil
}

// Outbox implements Repository.
func (s *SQLite) Outbox(ctx context.Context, limit int) ([]OutboxEntry, error) {
	rows, err := s.fixed.outbox.QueryContext(ctx, limit)
	if err != nil {
		return nil, sqliteErr("sqlite: read outbox", err)
	}
	defer func() { _ = rows.Close() }()
	var out []OutboxEntry
	for rows.Next() {
		var (
			e       OutboxEntry
			kind    string
			created int64
		)
		if err := rows.Scan(&e.ID, &kind, &e.Activity, &e.ReservationID, &e.OrderID, &e.User, &created); err != nil {
			return nil, sqliteErr("sqlite: read outbox", err)
		}
		e.Kind, e.CreatedAt = OutboxKind(kind), time.UnixMilli(created)
		out = append(out, e)
	}
	return out, sqliteErr("sqlite: read outbox", rows.Err())
}

// DeleteOutbox implements Repository.
func (s *SQLite) DeleteOutbox(ctx context.Context, id int64) error {
	_, err := s.fixed.deleteOutbox.ExecContext(ctx, id)
	return sqliteErr(fmt.Sprintf("sqlite: delete outbox row %d", id), err)
}

// Stock implements Repository.
func (s *SQLite) Stock(ctx context.Context, activity string) (Stock, error) {
	st := Stock{Activity: activity}
	err := s.fixed.stock.QueryRowContext(ctx, activity).Scan(&st.Total, &st.Left)
	if errors.Is(err, sql.ErrNoRows) {
		return Stock{}, fmt.Errorf("stock of %s: %w", activity, ErrNotFound)
	}
	return st, sqliteErr("sqlite: stock of "+activity, err)
}

// Orders implements Repository.
func (s *SQLite) Orders(ctx context.Context, activity string) ([]Order, error) {
	// With the archived ones (Archive): reconcile counts every order of the sale.
	rows, err := s.r.QueryContext(ctx, `SELECT `+sqliteOrderCols+` FROM orders WHERE activity = ?1
		UNION ALL SELECT `+sqliteOrderCols+` FROM orders_archive WHERE activity = ?1 ORDER BY created_at, id`, activity)
	if err != nil {
		return nil, sqliteErr("sqlite: orders of "+activity, err)
	}
	defer func() { _ = rows.Close() }()
	var out []Order
	for rows.Next() {
		o, err := scanSQLiteOrder(rows)
		if err != nil {
			return nil, sqliteErr("sqlite: orders of "+activity, err)
		}
		out = append(out, o)
	}
	return out, sqliteErr("sqlite: orders of "+activity, rows.Err())
}

// OutboxLen implements Repository.
func (s *SQLite) OutboxLen(ctx context.Context, activity string) (int64, error) {
	var n int64
	err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM outbox WHERE activity = ?`, activity).Scan(&n)
	return n, sqliteErr("sqlite: outbox length of "+activity, err)
}

// BuyerOrder implements Repository. SQLite has no partitions; an order's buyer never changes, so
// checking it before the call is as good as inside it.
func (s *SQLite) BuyerOrder(ctx context.Context, user, id string) (Order, error) {
	o, err := s.Order(ctx, id)
	if err == nil && o.User != user {
		return Order{}, fmt.Errorf("order %s of another user: %w", id, ErrNotFound)
	}
	return o, err
}

// BuyerCancel implements Repository.
func (s *SQLite) BuyerCancel(ctx context.Context, user, id string, now time.Time) (Order, error) {
	if _, err := s.BuyerOrder(ctx, user, id); err != nil {
		return Order{}, err
	}
	return s.Cancel(ctx, id, now)
}

// BuyerStartPayment implements Repository.
func (s *SQLite) BuyerStartPayment(ctx context.Context, user, orderID string, now time.Time) (Payment, error) {
	if _, err := s.BuyerOrder(ctx, user, orderID); err != nil {
		return Payment{}, err
	}
	return s.StartPayment(ctx, orderID, now)
}
