package orderbackend

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

const pgPaymentCols = `key, order_id, attempt, amount, currency, status, provider_ref, created_at, updated_at`

func scanPGPayment(row pgx.Row) (Payment, error) {
	var (
		p      Payment
		status string
	)
	if err := row.Scan(&p.Key, &p.OrderID, &p.Attempt, &p.Amount.Amount, &p.Amount.Currency, &status, &p.ProviderRef,
		&p.CreatedAt, &p.UpdatedAt); err != nil {
		return Payment{}, err
	}
	p.Status = PaymentStatus(status)
	return p, nil
}

// pgLockOrder reads an order and locks its row: every transaction that writes a payment locks its
// order first, so a start and a settlement of one order run one after the other.
func pgLockOrder(ctx context.Context, tx pgx.Tx, id string) (Order, error) {
	o, err := scanPGOrder(tx.QueryRow(ctx, `SELECT `+pgOrderCols+` FROM orders WHERE id = $1 FOR UPDATE`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Order{}, fmt.Errorf("order %s: %w", id, ErrNotFound)
	}
	return o, err
}

// StartPayment implements Repository.
func (p *Postgres) StartPayment(ctx context.Context, orderID string, now time.Time) (Payment, error) {
	var pay Payment
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		o, err := pgLockOrder(ctx, tx, orderID)
		if err != nil {
			return err
		}
		if err := startErr(o, now); err != nil {
			return err
		}
		var last *Payment
		l, err := scanPGPayment(tx.QueryRow(ctx, `SELECT `+pgPaymentCols+` FROM payments WHERE order_id = $1
			ORDER BY attempt DESC LIMIT 1`, orderID))
		switch {
		case err == nil:
			last = &l
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		var fresh bool
		if pay, fresh = nextPayment(o, last, now); !fresh {
			return nil
		}
		_, err = tx.Exec(ctx, `INSERT INTO payments (`+pgPaymentCols+`) VALUES ($1, $2, $3, $4, $5, 'started', '', $6, $6)`,
			pay.Key, pay.OrderID, pay.Attempt, pay.Amount.Amount, pay.Amount.Currency, pay.CreatedAt)
		return err
	})
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrExpired) || errors.Is(err, ErrNotPending) {
		return Payment{}, err
	}
	return pay, pgErr("postgres: start payment of order "+orderID, err)
}

// SettlePayment implements Repository.
func (p *Postgres) SettlePayment(ctx context.Context, key string, outcome ChargeOutcome, ref string, now time.Time) (Payment, Order, error) {
	var (
		pay Payment
		o   Order
	)
	// The order id is in the key's row; read it first, then lock the order, then the attempt.
	var orderID string
	err := p.pool.QueryRow(ctx, `SELECT order_id FROM payments WHERE key = $1`, key).Scan(&orderID)
	if errors.Is(err, pgx.ErrNoRows) {
		return Payment{}, Order{}, fmt.Errorf("payment %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return Payment{}, Order{}, pgErr("postgres: settle payment "+key, err)
	}
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		var err error
		if o, err = pgLockOrder(ctx, tx, orderID); err != nil {
			return err
		}
		if pay, err = scanPGPayment(tx.QueryRow(ctx, `SELECT `+pgPaymentCols+` FROM payments WHERE key = $1 FOR UPDATE`, key)); err != nil {
			return err
		}
		status, pays := settled(pay, o, outcome, now)
		if status == pay.Status {
			return nil
		}
		if pays {
			if o, err = scanPGOrder(tx.QueryRow(ctx, `UPDATE orders SET status = 'paid', paid_at = $2, payment_ref = $3
				WHERE id = $1 RETURNING `+pgOrderCols, o.ID, now, key)); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO outbox (activity, reservation_id, kind, created_at) VALUES ($1, $2, 'paid', $3)`,
				o.Activity, o.ReservationID, now); err != nil {
				return err
			}
		}
		if ref == "" {
			ref = pay.ProviderRef
		}
		pay, err = scanPGPayment(tx.QueryRow(ctx, `UPDATE payments SET status = $2, provider_ref = $3, updated_at = $4
			WHERE key = $1 RETURNING `+pgPaymentCols, key, string(status), ref, now))
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return Payment{}, Order{}, err
	}
	return pay, o, pgErr("postgres: settle payment "+key, err)
}

// MarkRefunded implements Repository.
func (p *Postgres) MarkRefunded(ctx context.Context, key string, now time.Time) (Payment, error) {
	pay, err := scanPGPayment(p.pool.QueryRow(ctx, `UPDATE payments SET status = 'refunded', updated_at = $2
		WHERE key = $1 AND status = 'refund_due' RETURNING `+pgPaymentCols, key, now))
	if errors.Is(err, pgx.ErrNoRows) {
		pay, err = scanPGPayment(p.pool.QueryRow(ctx, `SELECT `+pgPaymentCols+` FROM payments WHERE key = $1`, key))
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return Payment{}, fmt.Errorf("payment %s: %w", key, ErrNotFound)
		case err == nil && pay.Status != PaymentRefunded:
			return pay, fmt.Errorf("mark payment %s (%s) refunded: %w", key, pay.Status, ErrNotRefundable)
		}
	}
	return pay, pgErr("postgres: mark payment "+key+" refunded", err)
}

// OpenPayments implements Repository.
func (p *Postgres) OpenPayments(ctx context.Context, startedBefore time.Time, limit int) ([]Payment, error) {
	return p.queryPayments(ctx, "postgres: open payments", `SELECT `+pgPaymentCols+` FROM payments
		WHERE status = 'refund_due' OR (status = 'started' AND updated_at <= $1)
		ORDER BY updated_at LIMIT $2`, startedBefore, limit)
}

// Payments implements Repository.
func (p *Postgres) Payments(ctx context.Context, activity string) ([]Payment, error) {
	return p.queryPayments(ctx, "postgres: payments of "+activity, `SELECT p.key, p.order_id, p.attempt, p.amount,
		p.currency, p.status, p.provider_ref, p.created_at, p.updated_at
		FROM payments p JOIN orders o ON o.id = p.order_id WHERE o.activity = $1 ORDER BY p.created_at, p.key`, activity)
}

func (p *Postgres) queryPayments(ctx context.Context, op, query string, args ...any) ([]Payment, error) {
	rows, err := p.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, pgErr(op, err)
	}
	defer rows.Close()
	var out []Payment
	for rows.Next() {
		pay, err := scanPGPayment(rows)
		if err != nil {
			return nil, pgErr(op, err)
		}
		out = append(out, pay)
	}
	return out, pgErr(op, rows.Err())
}
