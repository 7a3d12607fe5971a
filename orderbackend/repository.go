package orderbackend

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/money"
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
	Amount        money.Price // unit price times Qty (Listing); zero when the activity has no price
	Title         string
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

	// CreateOrders turns a batch of one activity's wins into orders in one transaction, with
	// exactly the outcomes CreateOrder would give each win if they were created one by one in the
	// slice's order: outcome i belongs to win i. A win the stock guard refuses (or whose activity
	// has no stock row) gets ErrWinRefused and a reservation with another buyer's order
	// ErrConflict, for that win only; the batch's other wins still commit. Any other failure rolls
	// the whole batch back and is returned as the error (ErrUnavailable when transient). A slice
	// that mixes activities is refused with admission.ErrBadInput and nothing written.
	CreateOrders(ctx context.Context, ns []NewOrder) ([]CreateOutcome, error)

	// Order returns one order by id (ErrNotFound).
	Order(ctx context.Context, id string) (Order, error)

	// BuyerOrder is Order for the order's buyer, as the order API knows them from the token:
	// another user's order is ErrNotFound. On a partitioned PostgreSQL it reads the buyer's
	// partition only.
	BuyerOrder(ctx context.Context, user, id string) (Order, error)

	// OrderByReservation returns the order a reservation became (ErrNotFound).
	OrderByReservation(ctx context.Context, activity, reservationID string) (Order, error)

	// StartPayment records a payment attempt of a pending order whose window is open at now,
	// before any provider is called, and returns it: the order's latest attempt if it is still
	// without outcome (a retry charges under the same key, so the provider takes the money once),
	// else a new attempt numbered after the last, for the order's amount. A paid order returns
	// ErrNotPending; a cancelled or expired one ErrExpired; an unknown one ErrNotFound.
	StartPayment(ctx context.Context, orderID string, now time.Time) (Payment, error)

	// BuyerStartPayment is StartPayment for the order's buyer (another user's order is
	// ErrNotFound), in the buyer's partition only.
	BuyerStartPayment(ctx context.Context, user, orderID string, now time.Time) (Payment, error)

	// SettlePayment records a provider's outcome of the attempt with this key, in one transaction.
	// Succeeded pays the order (and queues the buyer's result update in the outbox) if it is
	// pending and its window is open at now; if it is not (the window closed, another attempt
	// paid it) the attempt becomes PaymentRefundDue. Failed ends an attempt without outcome.
	// An attempt that already has money (succeeded, refund due, refunded) never changes, so a
	// replayed or late outcome changes nothing, and a paid order is never touched. It returns the
	// attempt and its order as they are afterwards; an unknown key ErrNotFound.
	SettlePayment(ctx context.Context, key string, outcome ChargeOutcome, providerRef string, now time.Time) (Payment, Order, error)

	// NotifyPayment stores a provider's notification about the attempt n.Key, in one transaction:
	// the event is recorded in payment_events under (n.Provider, n.EventID) and its outcome
	// applied with SettlePayment's rules (a success pays the pending order in its window or
	// becomes PaymentRefundDue, which the sweeper refunds; an attempt with money never changes;
	// nothing un-pays or cancels an order). An event already stored is a replay: Duplicate, and
	// nothing changes. An unknown key is ErrNotFound and a notification without provider, event
	// id or key, or with another outcome, ErrBadNotification; neither stores anything.
	NotifyPayment(ctx context.Context, n Notification, now time.Time) (NotifyResult, error)

	// MarkRefunded records that a PaymentRefundDue attempt's money was given back (the provider
	// confirmed the refund); a refunded attempt is returned as is, any other status is
	// ErrNotRefundable.
	MarkRefunded(ctx context.Context, key string, now time.Time) (Payment, error)

	// OpenPayments returns up to limit attempts the sweeper must settle: those without outcome
	// last touched at or before startedBefore, and every one with a refund due; least recently
	// touched first. StartPayment touches the attempt it returns (a retry charges again).
	OpenPayments(ctx context.Context, startedBefore time.Time, limit int) ([]Payment, error)

	// TouchPayment records that the sweeper dealt with an attempt that stays open (the provider
	// answered pending, or its refund failed): its updated_at becomes now (never earlier), so
	// OpenPayments serves the others first and a pending attempt is asked about again only
	// SettleAfter later. Any other status, and an unknown key, is left alone.
	TouchPayment(ctx context.Context, key string, now time.Time) error

	// Payments returns every payment attempt of an activity's orders, for reconciliation.
	Payments(ctx context.Context, activity string) ([]Payment, error)

	// Cancel cancels a pending order (the owner gave up), gives its items back to the database
	// stock and writes the release to the outbox, in one transaction. A cancelled order is
	// returned as is; a paid one returns ErrNotPending.
	Cancel(ctx context.Context, id string, now time.Time) (Order, error)

	// BuyerCancel is Cancel for the order's buyer (another user's order is ErrNotFound), in the
	// buyer's partition only.
	BuyerCancel(ctx context.Context, user, id string, now time.Time) (Order, error)

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

	// Archive moves a finished sale's orders and their payment attempts to the archive tables, in
	// transactions of up to batch orders (DefaultArchiveBatch when <= 0), and reports the counts
	// before and after. A sale with a pending order, an attempt to settle or refund, or an outbox
	// row is refused with ErrNotFinished; the caller checks reconcile first (the archive command
	// does). Archived orders are still read by Order, BuyerOrder, OrderByReservation, Orders and
	// Payments, and found by CreateOrder and CreateOrders (a win delivered again gets its archived
	// order, never a second one); they are never written again. A second run moves nothing; an interrupted one is
	// finished by the next.
	Archive(ctx context.Context, activity string, batch int) (ArchiveReport, error)

	// OutboxLen counts the activity's outbox rows not yet relayed.
	OutboxLen(ctx context.Context, activity string) (int64, error)

	// Close releases the database connections.
	Close() error
}

// CreateOutcome is what CreateOrders did with one win. Err is nil, ErrWinRefused (Order is zero)
// or ErrConflict (Order is the reservation's existing order, for another buyer or quantity).
type CreateOutcome struct {
	Order   Order
	Created bool // a new order: this call inserted it and took its stock
	Err     error
}

// TxStats counts the transactions in which a repository created orders (CreateOrders), so that the
// mean wins per transaction can be watched: with SQLite's group commit, several calls share one.
type TxStats struct {
	Transactions int64 // committed transactions that created orders
	Calls        int64 // CreateOrders calls they answered
	Wins         int64 // wins they carried
}

// TxStatsReporter is implemented by repositories that count their order transactions (both of
// this package's); the Backend adds the counts to its metrics.
type TxStatsReporter interface {
	TxStats() TxStats
}

// OpenRepository opens the repository named by kind ("postgres" or "sqlite") with its data source:
// a PostgreSQL URL or key=value DSN, or an SQLite file path. Migrations are applied.
func OpenRepository(ctx context.Context, kind, dsn string) (Repository, error) {
	return OpenRepositoryWith(ctx, kind, dsn, PostgresOptions{})
}

// OpenRepositoryWith is OpenRepository with PostgreSQL's schema options; SQLite has no
// partitions, and refuses a Partitions other than 0 or 1.
func OpenRepositoryWith(ctx context.Context, kind, dsn string, opts PostgresOptions) (Repository, error) {
	switch kind {
	case "postgres", "postgresql":
		return NewPostgresWith(ctx, dsn, opts)
	case "sqlite", "sqlite3":
		if opts.Partitions > 1 {
			return nil, fmt.Errorf("open order repository: sqlite has no partitions (%d asked): partitions is a postgres option", opts.Partitions)
		}
		return NewSQLite(ctx, dsn)
	}
	return nil, fmt.Errorf("open order repository: unknown kind %q (want postgres or sqlite)", kind)
}

// order is the pending order a NewOrder creates.
func (n NewOrder) order() Order {
	return Order{
		ID: n.ID, ReservationID: n.ReservationID, Activity: n.Activity, User: n.User, Qty: n.Qty,
		Status: StatusPending, CreatedAt: n.CreatedAt, ExpiresAt: n.ExpiresAt, Amount: n.Amount, Title: n.Title,
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

// normalized truncates the times to the milliseconds both databases keep, so that the order a
// repository returns equals the one it stored.
func (n NewOrder) normalized() NewOrder {
	n.CreatedAt = time.UnixMilli(n.CreatedAt.UnixMilli())
	n.ExpiresAt = time.UnixMilli(n.ExpiresAt.UnixMilli())
	return n
}

// batchActivity returns the one activity of a CreateOrders batch: a repository takes the batch's
// stock row once, so a batch spans one activity (a consumer's read always does).
func batchActivity(op string, ns []NewOrder) (string, error) {
	act := ns[0].Activity
	for _, n := range ns[1:] {
		if n.Activity != act {
			return "", fmt.Errorf("%s: %w: a batch mixes activities %q and %q", op, admission.ErrBadInput, act, n.Activity)
		}
	}
	return act, nil
}

// batchPlan is what a CreateOrders transaction writes: the new orders, in the batch's order, and
// the stock they take together.
type batchPlan struct {
	outs    []CreateOutcome
	inserts []NewOrder
	take    int64
}

// planBatch decides every win of a batch exactly as creating them one by one in order would,
// from the state the transaction holds locked: the activity's stock (hasStock false when it has
// no stock row) and the orders the batch's reservations already have. A reservation that already
// has an order takes nothing; a new one takes its qty while left >= qty (the stock guard), and is
// refused otherwise. A reservation repeated in the batch finds the order its first occurrence
// makes. ns must be normalized; existing is consumed.
func planBatch(db string, ns []NewOrder, hasStock bool, left int64, existing map[string]Order) batchPlan {
	p := batchPlan{outs: make([]CreateOutcome, len(ns))}
	for i, n := range ns {
		if o, ok := existing[n.ReservationID]; ok {
			p.outs[i] = CreateOutcome{Order: o, Err: sameWin(o, n)}
			continue
		}
		switch {
		case !hasStock:
			p.outs[i].Err = fmt.Errorf("%s: create order for reservation %s: %w: activity %s has no stock row",
				db, n.ReservationID, ErrWinRefused, n.Activity)
		case left < n.Qty:
			p.outs[i].Err = fmt.Errorf("%s: create order for reservation %s: %w: activity %s has less than %d left",
				db, n.ReservationID, ErrWinRefused, n.Activity, n.Qty)
		default:
			left -= n.Qty
			p.take += n.Qty
			o := n.order()
			p.inserts = append(p.inserts, n)
			p.outs[i] = CreateOutcome{Order: o, Created: true}
			existing[n.ReservationID] = o
		}
	}
	return p
}

// errReplan is a CreateOrders transaction's internal signal that the database is not as its
// plan assumed: the fast path met a reservation that already has an order or a stock guard that
// refuses the batch's sum, or the careful path met a row that changed under it. The transaction
// rolls back, and the batch is planned again, carefully. The careful path cannot meet it while
// every writer takes the stock row first, as this package's do; it guards against one that does
// not.
var errReplan = errors.New("the database is not as the batch's plan assumed")

// batchAttempts bounds the careful plans after errReplan; the last one is ErrUnavailable.
const batchAttempts = 3

// fastTake is the stock a batch takes on the fast path, which assumes what a sale's batch almost
// always is: every win new, and the stock enough for all of them. It then takes the batch's summed
// qty with one guarded update and inserts every order, which gives exactly the outcomes of one by
// one (each prefix of the batch fits too). Any other batch (a redelivery, a refusal) rolls back
// with errReplan and takes the careful path (planBatch). A batch naming a reservation twice
// goes careful at once.
func fastTake(ns []NewOrder) (take int64, ok bool) {
	seen := make(map[string]struct{}, len(ns))
	for _, n := range ns {
		if _, dup := seen[n.ReservationID]; dup {
			return 0, false
		}
		seen[n.ReservationID] = struct{}{}
		take += n.Qty
	}
	return take, true
}

// allCreated is the outcome of a batch the fast path committed.
func allCreated(ns []NewOrder) []CreateOutcome {
	outs := make([]CreateOutcome, len(ns))
	for i, n := range ns {
		outs[i] = CreateOutcome{Order: n.order(), Created: true}
	}
	return outs
}

// normalizedAll returns a normalized copy of ns, leaving the caller's slice alone.
func normalizedAll(ns []NewOrder) []NewOrder {
	out := make([]NewOrder, len(ns))
	for i, n := range ns {
		out[i] = n.normalized()
	}
	return out
}

// firstOutcome turns a batch of one into CreateOrder's answer.
func firstOutcome(outs []CreateOutcome, err error) (Order, bool, error) {
	if err != nil {
		return Order{}, false, err
	}
	return outs[0].Order, outs[0].Created, outs[0].Err
}
