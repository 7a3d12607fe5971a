// Package admission decides who gets an item in a flash sale.
//
// One decision is taken up to a million times in a few seconds: does this buyer get an item? A
// Store takes it atomically (never more than the stock, never more than the per-user limit, never
// twice for one request), appends every win to the activity's wins queue in the same step, and
// gives a reservation back exactly once. Three stores implement it with identical semantics,
// proven by one conformance suite (package admissiontest): redisstore.Store for any number of
// nodes, localstore.Store, durable in a folder on one node, and localstore.Memory, which keeps
// nothing across a restart. Each is also a Caddy guest module of the namespace seckill.stores.
//
// Guard wraps a Store with what every node adds in front of it: a node-local sold-out flag, so a
// rejection after the sell-out costs no store call, and a circuit breaker that fails closed.
package admission

import (
	"context"
	"time"
)

// Store is the atomic admission state shared by every node of a sale.
//
// Implementations must be safe for concurrent use. Every write is all-or-nothing, and a rejection or
// a refusal before the store was reached (bad input, unknown activity, open breaker) has changed
// nothing. A transport error (timeout, dropped connection) is different: the operation may have
// been carried out and its answer lost, so retry it with the same request id (Admit replays the
// first answer; Release reports the same) instead of assuming it did nothing.
type Store interface {
	Catalog
	Admitter
	Results
	Queue

	// Close releases the store's resources.
	Close() error
}

// Catalog defines the activities and reads their counters: what the configuration, the admin
// API and reconcile use.
type Catalog interface {
	// Define creates an activity or updates its definition. Redefining an activity whose window has
	// opened is refused with ErrActivityRunning unless force is set, so that a configuration reload
	// never resets stock. A redefinition never resets what was sold: the remaining stock moves by the
	// difference between the old and the new total, and a total below what was already sold is
	// refused with ErrStockBelowSold. An identical definition is a no-op. A redefinition that raises
	// the total is announced on the restock channel (see Restocks), like a release. The stored
	// activity (with its salt) is returned.
	Define(ctx context.Context, a Activity, force bool) (Activity, error)

	// Activity returns the stored definition and live counters of one activity.
	Activity(ctx context.Context, id string) (Snapshot, error)

	// Activities lists the ids of every defined activity, sorted.
	Activities(ctx context.Context) ([]string, error)

	// Delete removes an activity and every key it owns. It is refused with ErrActivityRunning while
	// the window is open unless force is set.
	Delete(ctx context.Context, id string, force bool) error

	// Remaining returns the stock left.
	Remaining(ctx context.Context, activity string) (int64, error)

	// HeldRequests lists, in no particular order, the request ids of activity's wins that are not
	// released. Every such win holds at least one item, so the list is bounded by the activity's
	// stock. Request ids are scoped to the user, so an id two users both won with may be listed
	// twice. An unknown activity is ErrUnknownActivity.
	HeldRequests(ctx context.Context, activity string) ([]string, error)
}

// Admitter takes the admission decisions and gives reservations back: the buy path and the
// order backend's cancellations.
type Admitter interface {
	// Admit takes the admission decision for one request. Wins are appended to the wins queue in
	// the same atomic step. A request id that already won returns that first answer again, without
	// taking more stock, whatever the repeat's qty (Decision.Qty is the won one): this makes
	// client retries and transport-level retries harmless.
	Admit(ctx context.Context, r Request) (Decision, error)

	// Replay returns the stored first answer of user's request id in activity, exactly as Admit
	// would replay it (Replayed set), and never decides anew: a request id of the user that has
	// won nothing is ErrNotFound, with nothing written. Like Admit's replay it ignores the window
	// and the stock, and replays a released win. The edge asks it for a keyed buy that may no
	// longer be admitted (a waiting room's session is over) but may be the retry of a win.
	Replay(ctx context.Context, activity, user, requestID string) (Decision, error)

	// Release gives a reservation's items back to the stock exactly once, however often and from
	// however many processes it is called. It reports whether this call was the one that released.
	// Released stock is announced on the restock channel (see Restocks).
	Release(ctx context.Context, activity, reservationID string) (bool, error)

	// Restocks delivers the id of every activity whose stock was released or raised, on any node,
	// until ctx is done. Delivery is best effort (pub/sub): Guard also probes periodically.
	Restocks(ctx context.Context) (<-chan string, error)
}

// Results holds each buyer's latest record in an activity, which the order backend writes and
// buyers poll.
type Results interface {
	// SetResult stores a result record of one of a user's reservations (r.ReservationID), which
	// buyers poll. It becomes the user's latest record unless that is another reservation still in
	// flight (queued or pending_payment): a newer win keeps showing until its order exists. Once
	// the user has had two reservations in the activity, the store also keeps the record of each
	// (Result.Reservations; Admit starts the list). A reservation id must not contain a space or
	// a NUL byte. GetResult reads the latest record, with Reservations, and returns ErrNotFound
	// when the user has none.
	SetResult(ctx context.Context, activity, user string, r Result) error
	GetResult(ctx context.Context, activity, user string) (Result, error)

	// AppendResult is GetResult for a poll: it appends the record to dst as JSON, in exactly the
	// encoding encoding/json gives a Result (which is the edge's answer), and returns the
	// extended slice with the record's code. redisstore.Store hands on the JSON it stores when it is
	// already in that encoding, with no decoding and encoding again. A user without a record is
	// ErrNotFound; so may be an unknown activity (ErrUnknownActivity is also allowed): the caller
	// has resolved the activity already, and telling the two apart would cost redisstore.Store a
	// second round trip on every miss.
	AppendResult(ctx context.Context, dst []byte, activity, user string) ([]byte, string, error)
}

// Queue is the per-activity wins queue an order consumer reads: a Redis Stream with a consumer
// group in redisstore.Store, an in-process equivalent with the same semantics in localstore.Memory.
type Queue interface {
	// EnsureGroup creates the consumer group if it does not exist; the group starts at the
	// beginning of the queue so that no win appended before the consumer first ran is missed.
	EnsureGroup(ctx context.Context, activity, group string) error

	// ReadGroup delivers up to count wins to consumer (a Redis stream entry holds all the wins of
	// one admission call and comes whole, so its wins may carry a read past count; see
	// docs/admission.md, "The wins queue"). With pending set it re-reads the
	// consumer's own delivered but unacknowledged entries (do this first after a restart); without
	// it, it delivers new entries, waiting up to block for one to arrive (0 means do not wait).
	ReadGroup(ctx context.Context, activity, group, consumer string, count int, block time.Duration, pending bool) ([]Win, error)

	// Ack acknowledges processed wins by their ids; acknowledging a win twice is harmless.
	Ack(ctx context.Context, activity, group string, ids ...string) error

	// Claim transfers to consumer the entries that have been pending longer than minIdle (their
	// consumer is presumed dead) and delivers their wins not acknowledged yet, up to count as for
	// ReadGroup, with their delivery counts.
	Claim(ctx context.Context, activity, group, consumer string, minIdle time.Duration, count int) ([]Win, error)

	// DeadLetter moves a win to the activity's dead-letter queue and acknowledges it, in one
	// atomic step.
	DeadLetter(ctx context.Context, activity, group string, w Win, reason string) error

	// DeadLetters lists the dead-letter queue, oldest first, up to count entries.
	DeadLetters(ctx context.Context, activity string, count int) ([]Win, error)

	// Backlog counts the wins group has not acknowledged yet: never delivered, plus delivered
	// and pending. It is the order backlog monitoring watches. An unknown group is ErrNotFound.
	Backlog(ctx context.Context, activity, group string) (int64, error)
}

// Activity is the definition of one sale.
type Activity struct {
	ID        string        `json:"id"`
	Stock     int64         `json:"stock"`      // total items on sale
	Limit     int64         `json:"limit"`      // most items one user may hold
	Start     time.Time     `json:"start"`      // the window opens (inclusive)
	End       time.Time     `json:"end"`        // the window closes (exclusive)
	PayWithin time.Duration `json:"pay_within"` // how long a winner has to pay
	Salt      string        `json:"salt"`       // per-activity secret salt; generated when empty

	// Buckets splits the stock into that many buckets under their own Redis Cluster hash tags,
	// so that one hot activity is decided on several shards (docs/admission.md, "Stock
	// buckets"). 0 or 1 is not split; 2 to MaxBuckets, and never more than Stock. Only
	// redisstore.Store splits; the count is fixed once defined.
	Buckets int `json:"buckets,omitempty"`
}

// Snapshot is an activity's definition together with its live counters.
type Snapshot struct {
	Activity
	Remaining int64 `json:"remaining"` // stock left
	Sold      int64 `json:"sold"`      // items held by buyers (Stock - Remaining)
	Buyers    int64 `json:"buyers"`    // distinct users holding items
	Queued    int64 `json:"queued"`    // entries in the wins queue
	Dead      int64 `json:"dead"`      // entries in the dead-letter queue
}

// Request asks for an admission.
type Request struct {
	Activity  string
	User      string
	Qty       int64
	RequestID string // idempotency key, scoped to the user

	// MayReplay marks a request id chosen by the client (an Idempotency-Key), which may repeat an
	// earlier win. Guard then asks the store even after it has flagged the activity sold out, if
	// the id may be a held win's, so a winner's retry gets its first answer back instead of
	// sold_out. Stores ignore it.
	MayReplay bool
}

// Outcome is the business answer of an admission.
type Outcome uint8

// The outcomes of Admit. Only Won writes anything.
const (
	Won Outcome = iota + 1
	SoldOut
	LimitReached
	NotStarted
	Ended
)

// String returns the outcome's stable machine word, as used in HTTP answers.
func (o Outcome) String() string {
	switch o {
	case Won:
		return "queued"
	case SoldOut:
		return "sold_out"
	case LimitReached:
		return "limit_reached"
	case NotStarted:
		return "not_started"
	case Ended:
		return "ended"
	}
	return "unknown"
}

// Decision is the answer to a Request.
type Decision struct {
	Outcome       Outcome
	ReservationID string // set when Won
	Remaining     int64  // stock left after this decision
	Replayed      bool   // true when this is the stored first answer to a repeated request id

	// Qty is the items of the win, set when Won: a replay's is that of the win it replays, not
	// the repeated request's (a retry may ask for another qty), so that the edge vouches for
	// what was taken (a forwarded win's signed Seckill-Qty).
	Qty int64 `json:",omitempty"`

	// RemainingPartial marks a Remaining that is only the buyer's bucket's stock, a lower bound of
	// the activity's: a split activity's decision taken in a home bucket that still has stock, a
	// refusal there, or a win that emptied it while the other buckets could not be read (a
	// failover). Such a Remaining of 0 does not mean the activity is sold out.
	RemainingPartial bool `json:",omitempty"`
}

// Win is one entry of the wins queue: an admitted buyer waiting to become an order.
type Win struct {
	ID            string    `json:"id"` // queue entry id (a stream id in Redis)
	Activity      string    `json:"activity"`
	ReservationID string    `json:"reservation_id"`
	User          string    `json:"user"`
	Qty           int64     `json:"qty"`
	RequestID     string    `json:"request_id"`
	At            time.Time `json:"at"`         // admission time, from the store's clock
	Deliveries    int64     `json:"deliveries"` // times delivered to a consumer, this one included
	Reason        string    `json:"reason,omitempty"`
}

// Result is a user's latest state in one activity, as buyers poll it.
type Result struct {
	Code          string `json:"code"` // none, queued, pending_payment, paid, cancelled, failed
	ReservationID string `json:"reservation_id,omitempty"`
	OrderID       string `json:"order_id,omitempty"`
	PayBeforeMS   int64  `json:"pay_before_ms,omitempty"`

	// Reservations holds the record of each of the user's reservations, oldest first (the
	// latest MaxResultReservations), once the user has had more than one in the activity (a limit
	// above 1, or a purchase after a cancelled one); nil before. Its records have no Reservations.
	Reservations []Result `json:"reservations,omitempty"`
}

// MaxResultReservations bounds Result.Reservations: beyond it the oldest record is dropped, so a
// buyer who buys and cancels again and again cannot grow what every poll reads.
const MaxResultReservations = 32

// Equal reports whether r and o are the same record, Reservations included.
func (r Result) Equal(o Result) bool {
	if r.Code != o.Code || r.ReservationID != o.ReservationID || r.OrderID != o.OrderID ||
		r.PayBeforeMS != o.PayBeforeMS || len(r.Reservations) != len(o.Reservations) {
		return false
	}
	for i := range r.Reservations {
		if !r.Reservations[i].Equal(o.Reservations[i]) {
			return false
		}
	}
	return true
}
