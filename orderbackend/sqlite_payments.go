package orderbackend

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

const sqlitePaymentCols = `key, order_id, attempt, amount, currency, status, provider_ref, created_at, updated_at`

func scanSQLitePayment(row scanner) (Payment, error) {
	var (
		p                Payment
		status           string
		created, updated int64
	)
	if err := row.Scan(&p.Key, &p.OrderID, &p.Attempt, &p.Amount.Amount, &p.Amount.Currency, &status, &p.ProviderRef,
		&created, &updated); err != nil {
		return Payment{}, err
	}
	p.Status, p.CreatedAt, p.UpdatedAt = PaymentStatus(status), time.UnixMilli(created), time.UnixMilli(updated)
	return p, nil
}

// txOrder reads an order inside a write transaction (which is exclusive on SQLite).
func txOrder(ctx context.Context, tx *sql.Tx, id string) (Order, error) {
	o, err := scanSQLiteOrder(tx.QueryRowContext(ctx, `SELECT `+sqliteOrderCols+` FROM orders WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Order{}, fmt.Errorf("order %s: %w", id, ErrNotFound)
	}
	return o, err
}

// StartPayment implements Repository.
func (s *SQLite) StartPayment(ctx context.Context, orderID string, now time.Time) (Payment, error) {
	var pay Payment
	err := s.tx(ctx, func(tx *sql.Tx) error {
		o, err := txOrder(ctx, tx, orderID)
		if err != nil {
			return err
		}
		if err := startErr(o, now); err != nil {
			return err
		}
		var last *Payment
		l, err := scanSQLitePayment(tx.QueryRowContext(ctx, `SELECT `+sqlitePaymentCols+` FROM payments WHERE order_id = ?
			ORDER BY attempt DESC LIMIT 1`, orderID))
		switch {
		case err == nil:
			last = &l
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		var fresh bool
		if pay, fresh = nextPayment(o, last, now); !fresh {
			// A retry charges again under this key: the sweeper waits SettleAfter from this
			// charge, not from the first, before it asks the provider (touchTime).
			pay, err = scanSQLitePayment(tx.QueryRowContext(ctx, `UPDATE payments SET updated_at = MAX(updated_at, ?2)
				WHERE key = ?1 RETURNING `+sqlitePaymentCols, pay.Key, touchTime(now).UnixMilli()))
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO payments (`+sqlitePaymentCols+`) VALUES (?1, ?2, ?3, ?4, ?5, 'started', '', ?6, ?6)`,
			pay.Key, pay.OrderID, pay.Attempt, pay.Amount.Amount, pay.Amount.Currency, pay.CreatedAt.UnixMilli())
		return err
	})
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrExpired) || errors.Is(err, ErrNotPending) {
		return Payment{}, err
	}
	return pay, sqliteErr("sqlite: start payment of order "+orderID, err)
}

// SettlePayment implements Repository.
func (s *SQLite) SettlePayment(ctx context.Context, key string, outcome ChargeOutcome, ref string, now time.Time) (Payment, Order, error) {
	var (
		pay Payment
		o   Order
	)
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var err error
		pay, o, _, err = s.settleTx(ctx, tx, key, outcome, ref, now)
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return Payment{}, Order{}, err
	}
	return pay, o, sqliteErr("sqlite: settle payment "+key, err)
}

// settleTx records an outcome of the attempt with this key inside a write transaction (which is
// exclusive on SQLite): SettlePayment's rules. paid says whether this call paid the order.
func (s *SQLite) settleTx(ctx context.Context, tx *sql.Tx, key string, outcome ChargeOutcome, ref string, now time.Time) (pay Payment, o Order, paid bool, err error) {
	pay, err = scanSQLitePayment(tx.QueryRowContext(ctx, `SELECT `+sqlitePaymentCols+` FROM payments WHERE key = ?`, key))
	if errors.Is(err, sql.ErrNoRows) {
		return Payment{}, Order{}, false, fmt.Errorf("payment %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return Payment{}, Order{}, false, err
	}
	o, err = txOrder(ctx, tx, pay.OrderID)
	if err != nil {
		return Payment{}, Order{}, false, err
	}
	status, pays := settled(pay, o, outcome, now)
	if status == pay.Status {
		return pay, o, false, nil
	}
	if pays {
		if o, err = scanSQLiteOrder(tx.StmtContext(ctx, s.fixed.payOrder).QueryRowContext(ctx, o.ID, now.UnixMilli(), key)); err != nil {
			return Payment{}, Order{}, false, err
		}
		if _, err := tx.StmtContext(ctx, s.fixed.paidOutbox).ExecContext(ctx, o.Activity, o.ReservationID, now.UnixMilli()); err != nil {
			return Payment{}, Order{}, false, err
		}
	}
	if ref == "" {
		ref = pay.ProviderRef
	}
	pay, err = scanSQLitePayment(tx.QueryRowContext(ctx, `UPDATE payments SET status = ?2, provider_ref = ?3, updated_at = ?4
		WHERE key = ?1 RETURNING `+sqlitePaymentCols, key, string(status), ref, now.UnixMilli()))
	return pay, o, pays, err
}

// NotifyPayment implements Repository.
func (s *SQLite) NotifyPayment(ctx context.Context, n Notification, now time.Time) (NotifyResult, error) {
	if err := n.check(); err != nil {
		return NotifyResult{}, err
	}
	var res NotifyResult
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var seen int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM payment_events WHERE provider = ? AND event_id = ?`, n.Provider, n.EventID).Scan(&seen)
		switch {
		case err == nil:
			res.Duplicate = true
			res.Payment, res.Order, _, err = s.settleTx(ctx, tx, n.Key, ChargePending, "", now) // reads, changes nothing
			return err
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		if res.Payment, res.Order, res.Paid, err = s.settleTx(ctx, tx, n.Key, n.Outcome, n.Ref, now); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO payment_events (provider, event_id, payment_key, outcome, received_at)
			VALUES (?, ?, ?, ?, ?)`, n.Provider, n.EventID, n.Key, string(n.Outcome), now.UnixMilli())
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return NotifyResult{}, err
	}
	return res, sqliteErr("sqlite: notification "+n.Provider+" "+n.EventID, err)
}

// MarkRefunded implements Repository.
func (s *SQLite) MarkRefunded(ctx context.Context, key string, now time.Time) (Payment, error) {
	var pay Payment
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var err error
		pay, err = scanSQLitePayment(tx.QueryRowContext(ctx, `SELECT `+sqlitePaymentCols+` FROM payments WHERE key = ?`, key))
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("payment %s: %w", key, ErrNotFound)
		case err != nil:
			return err
		case pay.Status == PaymentRefunded:
			return nil
		case pay.Status != PaymentRefundDue:
			return fmt.Errorf("mark payment %s (%s) refunded: %w", key, pay.Status, ErrNotRefundable)
		}
		pay, err = scanSQLitePayment(tx.QueryRowContext(ctx, `UPDATE payments SET status = 'refunded', updated_at = ?2
			WHERE key = ?1 RETURNING `+sqlitePaymentCols, key, now.UnixMilli()))
		return err
	})
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrNotRefundable) {
		return pay, err
	}
	return pay, sqliteErr("sqlite: mark payment "+key+" refunded", err)
}

// TouchPayment implements Repository.
func (s *SQLite) TouchPayment(ctx context.Context, key string, now time.Time) error {
	err := s.tx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE payments SET updated_at = MAX(updated_at, ?2)
			WHERE key = ?1 AND status IN ('started', 'refund_due')`, key, touchTime(now).UnixMilli())
		return err
	})
	return sqliteErr("sqlite: touch payment "+key, err)
}

// OpenPayments implements Repository.
func (s *SQLite) OpenPayments(ctx context.Context, startedBefore time.Time, limit int) ([]Payment, error) {
	return s.queryPayments(ctx, "sqlite: open payments", `SELECT `+sqlitePaymentCols+` FROM payments
		WHERE status = 'refund_due' OR (status = 'started' AND updated_at <= ?)
		ORDER BY updated_at LIMIT ?`, startedBefore.UnixMilli(), limit)
}

// Payments implements Repository.
func (s *SQLite) Payments(ctx context.Context, activity string) ([]Payment, error) {
	return s.queryPayments(ctx, "sqlite: payments of "+activity, `SELECT p.key, p.order_id, p.attempt, p.amount,
		p.currency, p.status, p.provider_ref, p.created_at, p.updated_at
		FROM payments p JOIN orders o ON o.id = p.order_id WHERE o.activity = ?1
		UNION ALL SELECT `+sqlitePaymentCols+` FROM payments_archive WHERE activity = ?1
		ORDER BY created_at, key`, activity)
}

func (s *SQLite) queryPayments(ctx context.Context, op, query string, args ...any) ([]Payment, error) {
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, sqliteErr(op, err)
	}
	defer func() { _ = rows.Close() }()
	var out []Payment
	for rows.Next() {
		p, err := scanSQLitePayment(rows)
		if err != nil {
			return nil, sqliteErr(op, err)
		}
		out = append(out, p)
	}
	return out, sqliteErr(op, rows.Err())
}
