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
func pgLockOrder(ctx context.Context, tx pgx.Tx, user, id string) (Order, error) {
	o, err := scanPGOrder(tx.QueryRow(ctx, `SELECT `+pgOrderCols+` FROM orders WHERE user_id = $1 AND id = $2 FOR UPDATE`, user, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Order{}, fmt.Errorf("order %s: %w", id, ErrNotFound)
	}
	return o, err
}

// StartPayment implements Repository.
func (p *Postgres) StartPayment(ctx context.Context, orderID string, now time.Time) (Payment, error) {
	user, err := pgOrderUser(ctx, p.pool, orderID)
	if err != nil {
		return Payment{}, pgErrKeep("postgres: start payment of order "+orderID, err)
	}
	return p.BuyerStartPayment(ctx, user, orderID, now)
}

// BuyerStartPayment implements Repository: one partition, the buyer's.
func (p *Postgres) BuyerStartPayment(ctx context.Context, user, orderID string, now time.Time) (Payment, error) {
	var pay Payment
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		o, err := pgLockOrder(ctx, tx, user, orderID)
		if err != nil {
			return err
		}
		if err := startErr(o, now); err != nil {
			return err
		}
		var last *Payment
		l, err := scanPGPayment(tx.QueryRow(ctx, `SELECT `+pgPaymentCols+` FROM payments WHERE user_id = $1 AND order_id = $2
			ORDER BY attempt DESC LIMIT 1`, user, orderID))
		switch {
		case err == nil:
			last = &l
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		var fresh bool
		if pay, fresh = nextPayment(o, last, now); !fresh {
			// A retry charges again under this key: the sweeper waits SettleAfter from this
			// charge, not from the first, before it asks the provider (touchTime).
			pay, err = scanPGPayment(tx.QueryRow(ctx, `UPDATE payments SET updated_at = GREATEST(updated_at, $3)
				WHERE user_id = $1 AND key = $2 RETURNING `+pgPaymentCols, user, pay.Key, touchTime(now)))
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO payments (`+pgPaymentCols+`, user_id) VALUES ($1, $2, $3, $4, $5, 'started', '', $6, $6, $7)`,
			pay.Key, pay.OrderID, pay.Attempt, pay.Amount.Amount, pay.Amount.Currency, pay.CreatedAt, user)
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
	// The key names the order, and the guard table its buyer: the attempt and the order are read
	// in that buyer's partition only.
	orderID, user, err := p.keyOwner(ctx, key)
	if err != nil {
		return Payment{}, Order{}, err
	}
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		var err error
		pay, o, _, err = pgSettleTx(ctx, tx, user, orderID, key, outcome, ref, now)
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return Payment{}, Order{}, err
	}
	return pay, o, pgErr("postgres: settle payment "+key, err)
}

// pgSettleTx records an outcome of the attempt with this key of order orderID inside tx, locking
// the order, then the attempt: SettlePayment's rules. paid says whether this call paid the order.
func pgSettleTx(ctx context.Context, tx pgx.Tx, user, orderID, key string, outcome ChargeOutcome, ref string, now time.Time) (pay Payment, o Order, paid bool, err error) {
	o, err = pgLockOrder(ctx, tx, user, orderID)
	if err != nil {
		return Payment{}, Order{}, false, err
	}
	pay, err = scanPGPayment(tx.QueryRow(ctx, `SELECT `+pgPaymentCols+` FROM payments WHERE user_id = $1 AND key = $2 FOR UPDATE`, user, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return Payment{}, Order{}, false, fmt.Errorf("payment %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return Payment{}, Order{}, false, err
	}
	status, pays := settled(pay, o, outcome, now)
	if status == pay.Status {
		return pay, o, false, nil
	}
	if pays {
		if o, err = scanPGOrder(tx.QueryRow(ctx, `UPDATE orders SET status = 'paid', paid_at = $3, payment_ref = $4
			WHERE user_id = $1 AND id = $2 RETURNING `+pgOrderCols, user, o.ID, now, key)); err != nil {
			return Payment{}, Order{}, false, err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO outbox (activity, reservation_id, order_id, user_id, kind, created_at)
			VALUES ($1, $2, $3, $4, 'paid', $5)`, o.Activity, o.ReservationID, o.ID, o.User, now); err != nil {
			return Payment{}, Order{}, false, err
		}
	}
	if ref == "" {
		ref = pay.ProviderRef
	}
	pay, err = scanPGPayment(tx.QueryRow(ctx, `UPDATE payments SET status = $3, provider_ref = $4, updated_at = $5
		WHERE user_id = $1 AND key = $2 RETURNING `+pgPaymentCols, user, key, string(status), ref, now))
	return pay, o, pays, err
}

// NotifyPayment implements Repository. The order row is locked before the event is inserted, so
// two deliveries of one event run one after the other and the second finds the first's row.
func (p *Postgres) NotifyPayment(ctx context.Context, n Notification, now time.Time) (NotifyResult, error) {
	if err := n.check(); err != nil {
		return NotifyResult{}, err
	}
	orderID, user, err := p.keyOwner(ctx, n.Key)
	if err != nil {
		return NotifyResult{}, err
	}
	var res NotifyResult
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := pgLockOrder(ctx, tx, user, orderID); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `INSERT INTO payment_events (provider, event_id, payment_key, outcome, received_at)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT (provider, event_id) DO NOTHING`,
			n.Provider, n.EventID, n.Key, string(n.Outcome), now)
		if err != nil {
			return err
		}
		outcome, ref := n.Outcome, n.Ref
		if tag.RowsAffected() == 0 {
			res.Duplicate, outcome, ref = true, ChargePending, "" // read only: a replay changes nothing
		}
		res.Payment, res.Order, res.Paid, err = pgSettleTx(ctx, tx, user, orderID, n.Key, outcome, ref, now)
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return NotifyResult{}, err
	}
	return res, pgErr("postgres: notification "+n.Provider+" "+n.EventID, err)
}

// keyOwner finds the order and the buyer of a payment key (ErrNotFound): the key is the order id
// and the attempt, and the guard table maps the order id to its buyer, so no partition is scanned.
func (p *Postgres) keyOwner(ctx context.Context, key string) (orderID, user string, err error) {
	orderID, ok := orderOfKey(key)
	if !ok {
		return "", "", fmt.Errorf("payment %s: %w", key, ErrNotFound)
	}
	if user, err = pgOrderUser(ctx, p.pool, orderID); err != nil {
		if errors.Is(err, ErrNotFound) {
			return "", "", fmt.Errorf("payment %s: %w", key, ErrNotFound)
		}
		return "", "", pgErr("postgres: payment "+key, err)
	}
	return orderID, user, nil
}

// MarkRefunded implements Repository.
func (p *Postgres) MarkRefunded(ctx context.Context, key string, now time.Time) (Payment, error) {
	_, user, err := p.keyOwner(ctx, key)
	if err != nil {
		return Payment{}, err
	}
	pay, err := scanPGPayment(p.pool.QueryRow(ctx, `UPDATE payments SET status = 'refunded', updated_at = $3
		WHERE user_id = $1 AND key = $2 AND status = 'refund_due' RETURNING `+pgPaymentCols, user, key, now))
	if errors.Is(err, pgx.ErrNoRows) {
		pay, err = scanPGPayment(p.pool.QueryRow(ctx, `SELECT `+pgPaymentCols+` FROM payments WHERE user_id = $1 AND key = $2`, user, key))
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return Payment{}, fmt.Errorf("payment %s: %w", key, ErrNotFound)
		case err == nil && pay.Status != PaymentRefunded:
			return pay, fmt.Errorf("mark payment %s (%s) refunded: %w", key, pay.Status, ErrNotRefundable)
		}
	}
	return pay, pgErr("postgres: mark payment "+key+" refunded", err)
}

// TouchPayment implements Repository.
func (p *Postgres) TouchPayment(ctx context.Context, key string, now time.Time) error {
	_, user, err := p.keyOwner(ctx, key)
	if err != nil {
		return err
	}
	_, err = p.pool.Exec(ctx, `UPDATE payments SET updated_at = GREATEST(updated_at, $3)
		WHERE user_id = $1 AND key = $2 AND status IN ('started', 'refund_due')`, user, key, touchTime(now))
	return pgErr("postgres: touch payment "+key, err)
}

// OpenPayments implements Repository: a scan of every partition (the sweeper's), by the partial
// index each has.
func (p *Postgres) OpenPayments(ctx context.Context, startedBefore time.Time, limit int) ([]Payment, error) {
	return p.queryPayments(ctx, "postgres: open payments", `SELECT `+pgPaymentCols+` FROM payments
		WHERE status = 'refund_due' OR (status = 'started' AND updated_at <= $1)
		ORDER BY updated_at LIMIT $2`, startedBefore, limit)
}

// Payments implements Repository.
func (p *Postgres) Payments(ctx context.Context, activity string) ([]Payment, error) {
	return p.queryPayments(ctx, "postgres: payments of "+activity, `SELECT p.key, p.order_id, p.attempt, p.amount,
		p.currency, p.status, p.provider_ref, p.created_at, p.updated_at
		FROM payments p JOIN orders o ON o.user_id = p.user_id AND o.id = p.order_id WHERE o.activity = $1
		UNION ALL SELECT `+pgPaymentCols+` FROM payments_archive WHERE activity = $1
		ORDER BY created_at, key`, activity)
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
