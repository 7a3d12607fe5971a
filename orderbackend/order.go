package orderbackend

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"github.com/caddy-seckill/caddy-seckill/money"
)

// Status is an order's state: pending_payment, then exactly one of paid or cancelled.
type Status string

// The order states.
const (
	StatusPending   Status = "pending_payment"
	StatusPaid      Status = "paid"
	StatusCancelled Status = "cancelled"
)

// Order is one win turned into an order.
type Order struct {
	ID            string
	ReservationID string
	Activity      string
	User          string
	Qty           int64
	Status        Status
	CreatedAt     time.Time
	ExpiresAt     time.Time   // the buyer must pay before this instant
	PaidAt        time.Time   // zero unless paid
	CancelledAt   time.Time   // zero unless cancelled
	PaymentRef    string      // the key of the payment attempt that paid it (Payment.Key), set when paid
	Amount        money.Price // what it costs: the activity's unit price times Qty; zero when it has no price
	Title         string      // the activity's title when the order was made
}

// Listing is what an activity sells for: its unit price (zero: no price) and its title.
type Listing struct {
	Price money.Price
	Title string
}

// Stock is the database's own stock counter of one activity.
type Stock struct {
	Activity string
	Total    int64
	Left     int64
}

// OutboxKind says what a relay must do with an outbox row.
type OutboxKind string

// The outbox kinds.
const (
	// OutboxRelease: the order was cancelled; release its reservation in the store and tell the
	// buyer.
	OutboxRelease OutboxKind = "release"
	// OutboxPaid: the order was paid; tell the buyer.
	OutboxPaid OutboxKind = "paid"
)

// OutboxEntry is a store-side effect of a committed order change, waiting for the relay.
type OutboxEntry struct {
	ID            int64
	Kind          OutboxKind
	Activity      string
	ReservationID string
	OrderID       string
	User          string
	CreatedAt     time.Time
}

// Errors callers branch on; repositories wrap them with context, test with errors.Is.
var (
	// ErrNotFound: no such order.
	ErrNotFound = errors.New("order not found")

	// ErrWinRefused: the database stock guard refused a win (too little stock left, or no stock
	// row for the activity). Nothing was written; the consumer dead-letters the win.
	ErrWinRefused = errors.New("win refused by the database stock guard")

	// ErrExpired: the order can no longer be paid (its payment window closed or it was cancelled).
	ErrExpired = errors.New("order expired")

	// ErrNotPending: the order is no longer pending_payment (a cancel of a paid order).
	ErrNotPending = errors.New("order is not pending payment")

	// ErrUnavailable marks a failure that may pass by itself (the database is down or busy, a
	// connection broke): callers retry later instead of giving up on the work.
	ErrUnavailable = errors.New("database unavailable")

	// ErrConflict: a reservation id that already has an order arrived with a different user,
	// activity or quantity. It never happens with a correct store; the win is dead-lettered.
	ErrConflict = errors.New("reservation already has a different order")
)

// NewOrderID returns an unguessable order id that sorts by creation time: "o", 12 hex digits of
// the Unix time in milliseconds, then 24 random hex digits (96 bits, as unguessable as before).
// The time prefix puts the orders of a transaction next to each other in the primary-key index,
// so a commit writes one or two of its pages instead of about one per order: 0.77 of the CPU per
// order of random ids in a sale with SQLite (orderbackend/README.md, "Batches").
func NewOrderID() string {
	var b [18]byte
	ms := uint64(time.Now().UnixMilli())
	for i := 5; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	_, _ = rand.Read(b[6:]) // crypto/rand.Read never fails on supported platforms.
	return "o" + hex.EncodeToString(b[:])
}

// validOrderID bounds what the HTTP API passes to the database.
func validOrderID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}
