package orderbackend

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// pgArchiveCounts reads an activity's orders in the hot table and in the archive.
func (p *Postgres) pgArchiveCounts(ctx context.Context, activity string) (hot, archived int64, err error) {
	err = p.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM orders WHERE activity = $1),
		(SELECT count(*) FROM orders_archive WHERE activity = $1)`, activity).Scan(&hot, &archived)
	return hot, archived, err
}

// Archive implements Repository: batches of up to batch orders (DefaultArchiveBatch when <= 0),
// each moved with its payment attempts in one short transaction that locks only its own rows, so
// the other sales go on. Each batch commits whole, so a run that is interrupted leaves every order
// either in the hot table or in the archive, and the next run moves the rest.
func (p *Postgres) Archive(ctx context.Context, activity string, batch int) (ArchiveReport, error) {
	batch = archiveBatch(batch)
	op := "postgres: archive " + activity
	rep := ArchiveReport{Activity: activity}
	var pending, openPays, outbox int64
	err := p.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM orders WHERE activity = $1 AND status = 'pending_payment'),
		(SELECT count(*) FROM payments p JOIN orders o ON o.user_id = p.user_id AND o.id = p.order_id
		 WHERE o.activity = $1 AND p.status IN ('started', 'refund_due')),
		(SELECT count(*) FROM outbox WHERE activity = $1)`, activity).Scan(&pending, &openPays, &outbox)
	if err != nil {
		return rep, pgErr(op, err)
	}
	if err := unfinished(activity, pending, openPays, outbox); err != nil {
		return rep, err
	}
	if rep.HotBefore, rep.ArchivedBefore, err = p.pgArchiveCounts(ctx, activity); err != nil {
		return rep, pgErr(op, err)
	}
	for {
		var moved, pays int64
		err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
			moved, pays = 0, 0
			rows, err := tx.Query(ctx, `SELECT user_id, id, status FROM orders WHERE activity = $1 ORDER BY id LIMIT $2 FOR UPDATE`,
				activity, batch)
			if err != nil {
				return err
			}
			var users, ids []string
			for rows.Next() {
				var u, id, status string
				if err := rows.Scan(&u, &id, &status); err != nil {
					rows.Close()
					return err
				}
				if Status(status) == StatusPending { // made after the check: the sale is not over
					rows.Close()
					return unfinished(activity, 1, 0, 0)
				}
				users, ids = append(users, u), append(ids, id)
			}
			if err := rows.Err(); err != nil {
				return err
			}
			if len(ids) == 0 {
				return nil
			}
			const sel = `(user_id, %s) IN (SELECT * FROM unnest($1::text[], $2::text[]))`
			b := &pgx.Batch{}
			b.Queue(`INSERT INTO payments_archive (`+pgPaymentCols+`, user_id, activity)
				SELECT `+pgPaymentCols+`, user_id, $3 FROM payments WHERE `+fmt.Sprintf(sel, "order_id")+` ON CONFLICT DO NOTHING`,
				users, ids, activity)
			b.Queue(`DELETE FROM payments WHERE `+fmt.Sprintf(sel, "order_id"), users, ids).Exec(func(tag pgconn.CommandTag) error {
				pays = tag.RowsAffected()
				return nil
			})
			b.Queue(`INSERT INTO orders_archive (`+pgOrderCols+`) SELECT `+pgOrderCols+` FROM orders WHERE `+fmt.Sprintf(sel, "id")+
				` ON CONFLICT DO NOTHING`, users, ids)
			b.Queue(`DELETE FROM orders WHERE `+fmt.Sprintf(sel, "id"), users, ids).Exec(func(tag pgconn.CommandTag) error {
				moved = tag.RowsAffected()
				return nil
			})
			return tx.SendBatch(ctx, b).Close()
		})
		if errors.Is(err, ErrNotFinished) {
			return rep, err
		}
		if err != nil {
			return rep, pgErr(op, err)
		}
		if moved == 0 {
			break
		}
		rep.Moved += moved
		rep.PaymentsMoved += pays
		rep.Batches++
	}
	if rep.HotAfter, rep.ArchivedAfter, err = p.pgArchiveCounts(ctx, activity); err != nil {
		return rep, pgErr(op, err)
	}
	return rep, nil
}

// pgArchivedOrder reads an archived order of the buyer (pgx.ErrNoRows if there is none).
func pgArchivedOrder(ctx context.Context, p *Postgres, user, id string) (Order, error) {
	return scanPGOrder(p.pool.QueryRow(ctx, `SELECT `+pgOrderCols+` FROM orders_archive WHERE id = $2 AND user_id = $1`, user, id))
}
