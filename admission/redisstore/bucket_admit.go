package redisstore

import (
	"context"
	"fmt"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// admitBuckets is Admit for a split activity (r is validated): the decision is taken in the
// user's home bucket; when it has too little stock, stock is pulled in from the others and the
// decision taken again, so that sold_out is answered only when the activity as a whole has too
// little. An admission whose pulls were all emptied by other buyers before its next try, while
// stock remains, answers ErrContended: "try again", never a false sold_out.
func (s *Store) admitBuckets(ctx context.Context, r admission.Request, n int) (admission.Decision, error) {
	home := admission.HomeBucket(r.User, n)
	br := r
	br.Activity = bucketID(r.Activity, home, n)
	for pulls := 0; ; pulls++ {
		d, err := s.admitOn(ctx, br)
		if err != nil {
			return admission.Decision{}, fmt.Errorf("admit %s: bucket %d: %w", r.Activity, home, err)
		}
		if d.ReservationID != "" {
			d.ReservationID = bucketEntryID(d.ReservationID, home)
		}
		switch {
		case d.Replayed || (d.Outcome != admission.SoldOut && d.Outcome != admission.Won):
			d.RemainingPartial = true
			return d, nil
		case d.Outcome == admission.Won && d.Remaining > 0:
			d.RemainingPartial = true
			return d, nil
		case d.Outcome == admission.SoldOut && pulls < maxPulls:
			moved, err := s.pullInto(ctx, r.Activity, n, home, r.Qty)
			if err != nil {
				return admission.Decision{}, fmt.Errorf("admit %s: %w", r.Activity, err)
			}
			if moved > 0 {
				if s.afterPull != nil {
					s.afterPull(r.Activity, home)
				}
				continue
			}
		}
		// The home bucket is empty: Remaining is the activity's, so that a Guard flags the
		// activity sold out only when every bucket is.
		left, err := s.bucketRemaining(ctx, r.Activity, n)
		if err != nil {
			if d.Outcome == admission.Won {
				d.RemainingPartial = true // a win stands; its Remaining of 0 is the home bucket's
				return d, nil
			}
			return admission.Decision{}, fmt.Errorf("admit %s: %w", r.Activity, err)
		}
		if d.Outcome == admission.SoldOut && left >= r.Qty {
			// The stock is somewhere (another bucket, or a transfer that finished between the
			// pull's reads): look again while pulls remain, then refuse as contended.
			if pulls < maxPulls {
				continue
			}
			s.bucketCounters.contended.Add(1)
			return admission.Decision{}, fmt.Errorf("admit %s: bucket %d: %w: %d items left after %d pulls",
				r.Activity, home, admission.ErrContended, left, pulls)
		}
		d.Remaining = left
		return d, nil
	}
}

// releaseBuckets is Release for a split activity: the reservation id names its bucket.
func (s *Store) releaseBuckets(ctx context.Context, activity, reservationID string, n int) (bool, error) {
	raw, i, ok := splitBucketEntryID(reservationID, n)
	if !ok {
		return false, fmt.Errorf("release %s %s: %w", activity, reservationID, admission.ErrNotFound)
	}
	return s.releaseOn(ctx, activity, bucketID(activity, i, n), raw)
}
