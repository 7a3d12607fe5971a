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

// publish writes a buyer's result record, unless the record already says something this update
// must not overwrite. A user holds one record per activity but may hold several reservations (a
// limit above one, or a rebuy after a cancellation): a newer win still in flight keeps its record,
// and a final state (paid, cancelled, failed) of the same reservation is never taken back to
// pending by a late redelivery. The read-then-write is not atomic; the window only matters for
// concurrent updates of one user's two reservations.
func publish(ctx context.Context, store admission.Store, activity, user string, r admission.Result) error {
	cur, err := store.GetResult(ctx, activity, user)
	switch {
	case errors.Is(err, admission.ErrNotFound):
	case err != nil:
		return err
	case cur.ReservationID != "" && cur.ReservationID != r.ReservationID:
		if cur.Code == resultQueued || cur.Code == resultPending {
			return nil
		}
	case cur.Code == r.Code:
		if cur == r {
			return nil
		}
	case final(cur.Code) && !final(r.Code):
		return nil
	}
	return store.SetResult(ctx, activity, user, r)
}

func final(code string) bool {
	return code == string(StatusPaid) || code == string(StatusCancelled) || code == resultFailed
}
