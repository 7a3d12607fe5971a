package orderbackend

import (
	"context"
	"database/sql"
)

// Archive implements Repository: batches of up to batch orders, each moved with its payment
// attempts in one write transaction (the writer is held for one batch at a time, so other sales'
// orders go in between).
func (s *SQLite) Archive(ctx context.Context, activity string, batch int) (ArchiveReport, error) {
	batch = archiveBatch(batch)
	op := "sqlite: archive " + activity
	rep := ArchiveReport{Activity: activity}
	var pending, openPays, outbox int64
	err := s.r.QueryRowContext(ctx, `SELECT
		(SELECT count(*) FROM orders WHERE activity = ?1 AND status = 'pending_payment'),
		(SELECT count(*) FROM payments p JOIN orders o ON o.id = p.order_id
		 WHERE o.activity = ?1 AND p.status IN ('started', 'refund_due')),
		(SELECT count(*) FROM outbox WHERE activity = ?1)`, activity).Scan(&pending, &openPays, &outbox)
	if err != nil {
		return rep, sqliteErr(op, err)
	}
	if err := unfinished(activity, pending, openPays, outbox); err != nil {
		return rep, err
	}
	counts := func() (hot, archived int64, err error) {
		err = s.r.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM orders WHERE activity = ?1),
			(SELECT count(*) FROM orders_archive WHERE activity = ?1)`, activity).Scan(&hot, &archived)
		return hot, archived, sqliteErr(op, err)
	}
	if rep.HotBefore, rep.ArchivedBefore, err = counts(); err != nil {
		return rep, err
	}
	// The batch's orders, by the same subquery in every statement: the write transaction is
	// exclusive, so it names the same rows each time.
	const batchIDs = `(SELECT id FROM orders WHERE activity = ?1 ORDER BY id LIMIT ?2)`
	for {
		var moved, pays int64
		err := s.tx(ctx, func(tx *sql.Tx) error {
			var p int64
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM orders WHERE id IN `+batchIDs+` AND status = 'pending_payment'`,
				activity, batch).Scan(&p); err != nil {
				return err
			}
			if p > 0 { // made after the check: the sale is not over
				return unfinished(activity, p, 0, 0)
			}
			if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO payments_archive (`+sqlitePaymentCols+`, activity)
				SELECT `+sqlitePaymentCols+`, ?1 FROM payments WHERE order_id IN `+batchIDs, activity, batch); err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, `DELETE FROM payments WHERE order_id IN `+batchIDs, activity, batch)
			if err != nil {
				return err
			}
			if pays, err = res.RowsAffected(); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO orders_archive (`+sqliteOrderCols+`)
				SELECT `+sqliteOrderCols+` FROM orders WHERE id IN `+batchIDs, activity, batch); err != nil {
				return err
			}
			if res, err = tx.ExecContext(ctx, `DELETE FROM orders WHERE id IN `+batchIDs, activity, batch); err != nil {
				return err
			}
			moved, err = res.RowsAffected()
			return err
		})
		if err != nil {
			if errorsIsNotFinished(err) {
				return rep, err
			}
			return rep, sqliteErr(op, err)
		}
		if moved == 0 {
			break
		}
		rep.Moved += moved
		rep.PaymentsMoved += pays
		rep.Batches++
	}
	if rep.HotAfter, rep.ArchivedAfter, err = counts(); err != nil {
		return rep, err
	}
	return rep, nil
}
