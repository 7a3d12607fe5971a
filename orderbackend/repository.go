package orderbackend

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// NewOrder is what a consumer asks a Repository to create from one win.
type NewOrder struct {
	ID            string // used only if the reservation has no order yet
	Activity      string
	ReservationID string
	User          string
	Qty           int64
	CreatedAt     time.Time
	ExpiresAt     time.Time
}

// Repository is the order database. PostgreSQL (NewPostgres) and SQLite (NewSQLite) implement it
// with the same semantics; every method is safe for concurrent use, and every write method is one
// transaction. Failures that may pass by themselves are wrapped with ErrUnavailable.
type Repository interface {
	// EnsureStock creates the activity's stock row with total items, or moves an existing row to a
	// new total (left moves by the same difference, so what was sold stays sold).
	EnsureStock(ctx context.Context, activity string, total int64) error

	// CreateOrder turns a win into an order in one transaction: the order is inserted unless its
	// reservation already has one, and only a new order takes stock (left = left - qty, guarded by
	// left >= qty). It returns the order and whether this call created it. A redelivered win
	// returns the existing order; a win the stock guard refuses returns ErrWinRefused and writes
	// nothing.
	CreateOrder(ctx context.Context, o NewOrder) (Order, bool, error)

	// Order returns one order by id (ErrNotFound).
	Order(ctx context.Context, id string) (Order, error)

	// OrderByReservation returns the order a reservation became (ErrNotFound).
	OrderByReservation(ctx context.Context, activity, reservationID string) (Order, error)

	// Pay marks a pending order paid if its window is still open at now, and queues the buyer's
	// result update in the outbox. A paid order returns ErrNotPending with the order; a cancelled
	// or expired one ErrExpired.
	Pay(ctx context.Context, id, paymentRef string, now time.Time) (Order, error)

	// Cancel cancels a pending order (the owner gave up), gives its items back to the database
	// stock and writes the release to the outbox, in one transaction. A cancelled order is
	// returned as is; a paid one returns ErrNotPending.
	Cancel(ctx context.Context, id string, now time.Time) (Order, error)

	// CancelExpired cancels up to limit pending orders whose window closed at or before now,
	// exactly like Cancel, and returns them. Concurrent callers never cancel one order twice.
	CancelExpired(ctx context.Context, now time.Time, limit int) ([]Order, error)

	// Outbox returns up to limit outbox rows, oldest first; DeleteOutbox removes one once its
	// effect is done (deleting a missing row is harmless).
	Outbox(ctx context.Context, limit int) ([]OutboxEntry, error)
	DeleteOutbox(ctx context.Context, id int64) error

	// Stock returns the activity's stock row (ErrNotFound).
	Stock(ctx context.Context, activity string) (Stock, error)

	// Orders returns every order of an activity, for reconciliation.
	Orders(ctx context.Context, activity string) ([]Order, error)

	// OutboxLen counts the activity's outbox rows not yet relayed.
	OutboxLen(ctx context.Context, activity string) (int64, error)

	// Close releases the database connections.
	Close() error
}

// OpenRepository opens the repository named by kind ("postgres" or "sqlite") with its data source:
// a PostgreSQL URL or key=value DSN, or an SQLite file path. Migrations are applied.
func OpenRepository(ctx context.Context, kind, dsn string) (Repository, error) {
	switch kind {
	case "postgres", "postgresql":
		return NewPostgres(ctx, dsn)
	case "sqlite", "sqlite3":
		return NewSQLite(ctx, dsn)
	}
	return nil, fmt.Errorf("open order repository: unknown kind %q (want postgres or sqlite)", kind)
}

// errExisting is a repository's internal signal that the reservation already has an order.
var errExisting = errors.New("reservation already has an order")

// order is the pending order a NewOrder creates.
func (n NewOrder) order() Order {
	return Order{
		ID: n.ID, ReservationID: n.ReservationID, Activity: n.Activity, User: n.User, Qty: n.Qty,
		Status: StatusPending, CreatedAt: n.CreatedAt, ExpiresAt: n.ExpiresAt,
	}
}

// sameWin checks that a redelivered win matches the order its reservation already has: a
// reservation id reused for another buyer must not hand them someone else's order.
func sameWin(existing Order, n NewOrder) error {
	if existing.User != n.User || existing.Qty != n.Qty || existing.Activity != n.Activity {
		return fmt.Errorf("reservation %s: order %s is for user %q qty %d, win is for user %q qty %d: %w",
			n.ReservationID, existing.ID, existing.User, existing.Qty, n.User, n.Qty, ErrConflict)
	}
	return nil
}

// notPendingErr says why a pay matched no row of an order that exists.
func notPendingErr(o Order) error {
	if o.Status == StatusPaid {
		return fmt.Errorf("pay order %s: %w", o.ID, ErrNotPending)
	}
	return fmt.Errorf("pay order %s (%s, window closed %s): %w", o.ID, o.Status, o.ExpiresAt.UTC().Format(time.RFC3339), ErrExpired)
}

// normalized truncates the times to the milliseconds both databases keep, so that the order a
// repository returns equals the one it stored.
func (n NewOrder) normalized() NewOrder {
	n.CreatedAt = time.UnixMilli(n.CreatedAt.UnixMilli())
	n.ExpiresAt = time.UnixMilli(n.ExpiresAt.UnixMilli())
	return n
}
