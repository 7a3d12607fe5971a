package orderbackend

import (
	"context"
	"errors"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// Result codes the backend writes; "queued" is written by the store's admission itself.
const (
	resultQueued  = "queued"
	resultPending = string(StatusPending)
	resultFailed  = "failed"
)

// resultOf is the record a buyer polls for an order in its current state.
func resultOf(o Order) admission.Result {
	r := admission.Result{Code: string(o.Status), ReservationID: o.ReservationID, OrderID: o.ID}
	if o.Status == StatusPending {
		r.PayBeforeMS = o.ExpiresAt.UnixMilli()
	}
	return r
}

// ResultStore is what publish needs of the store: the result records buyers poll.
type ResultStore interface {
	GetResult(ctx context.Context, activity, user string) (admission.Result, error)
	SetResult(ctx context.Context, activity, user string, r admission.Result) error
}

// publish writes a buyer's result record of one reservation, unless the reservation's record
// already says something this update must not overwrite: a final state (paid, cancelled, failed)
// is never taken back to pending by a late redelivery, and an unchanged record is not written
// again. A user may hold several reservations (a limit above one, or a rebuy after a
// cancellation): the store keeps a record per reservation, and keeps a newer win still in flight
// as the latest (Store.SetResult). The read-then-write is not atomic; the window only matters
// for concurrent updates of one reservation.
func publish(ctx context.Context, store ResultStore, activity, user string, r admission.Result) error {
	cur, err := store.GetResult(ctx, activity, user)
	switch {
	case errors.Is(err, admission.ErrNotFound):
	case err != nil:
		return err
	default:
		if prev, ok := reservationRecord(cur, r.ReservationID); ok {
			if prev.Equal(r) || (final(prev.Code) && !final(r.Code)) {
				return nil
			}
		}
	}
	return store.SetResult(ctx, activity, user, r)
}

// reservationRecord returns the record of reservation id among a user's records.
func reservationRecord(cur admission.Result, id string) (admission.Result, bool) {
	if cur.ReservationID == id {
		cur.Reservations = nil
		return cur, true
	}
	for _, e := range cur.Reservations {
		if e.ReservationID == id {
			return e, true
		}
	}
	return admission.Result{}, false
}

func final(code string) bool {
	return code == string(StatusPaid) || code == string(StatusCancelled) || code == resultFailed
}
