package admission

import (
	"errors"
	"fmt"
)

// Errors callers branch on. Stores wrap them with context; test with errors.Is.
var (
	// ErrBadInput marks a request that can never succeed as given (empty ids, qty ≤ 0, qty above
	// the per-user limit, a malformed definition). Nothing was written.
	ErrBadInput = errors.New("bad input")

	// ErrUnknownActivity is returned for an activity that was never defined or was deleted.
	ErrUnknownActivity = errors.New("unknown activity")

	// ErrNotFound is returned for a reservation or result record that does not exist.
	ErrNotFound = errors.New("not found")

	// ErrActivityRunning refuses an unforced redefinition or deletion of an activity whose
	// window has opened: a configuration reload must never reset a running sale.
	ErrActivityRunning = errors.New("activity is running")

	// ErrStockBelowSold refuses a redefinition whose total stock is below what was already sold.
	ErrStockBelowSold = errors.New("stock below items already sold")

	// ErrInUse is returned by a store that another process holds, as a local store's folder is
	// held by the Caddy that runs the sale: a tool that only reads the sale asks that process.
	ErrInUse = errors.New("the store is in use by another process")

	// ErrBusy is returned by Guard while its circuit breaker is open: the store is failing and no
	// admission is taken without it (fail closed).
	ErrBusy = errors.New("store unavailable")

	// ErrContended refuses an admission of a split activity (Activity.Buckets) whose buyer's home
	// bucket was dry while other buckets still held stock, because other buyers won every item
	// its pulls brought in first. It is "try again", never "sold out": nothing was written, the
	// store is healthy, and a retry (with the same request id) may win.
	ErrContended = errors.New("stock contended")

	// ErrNotReplicated is returned (as a *ReplicationError) for a call that wrote on the Redis
	// master but was not confirmed by redisstore.Options.ReplicasAck replicas in time. The write is
	// on the master, not undone: the answer is unknown, not no (docs/admission.md).
	ErrNotReplicated = errors.New("not confirmed by replicas")
)

// ReplicationError says how many replicas confirmed a call that needed more. It wraps
// ErrNotReplicated.
type ReplicationError struct {
	Op, Activity  string
	Wanted, Acked int64
	ReservationID string // the win (or the released reservation) the master holds; may be empty
}

func (e *ReplicationError) Error() string {
	return fmt.Sprintf("%s %s: %s: %d of %d replicas acknowledged (reservation %q)",
		e.Op, e.Activity, ErrNotReplicated, e.Acked, e.Wanted, e.ReservationID)
}

// Unwrap returns ErrNotReplicated.
func (e *ReplicationError) Unwrap() error { return ErrNotReplicated }
