package redisstore

import (
	"context"
	"strings"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// A user's result records of a split activity live in the home bucket, where admit.lua writes
// them with the bare stream ids of the bucket's wins. The store shows them with the bucket
// appended (bucketEntryID), and stores a record's id without it. An id that is not one of the home
// bucket's (a caller's own) is stored with a trailing '.', which no stream id has, so that every
// id reads back as it was written.

// storedResvID maps a reservation id of user's home bucket home to the form stored there.
func storedResvID(id string, home, n int) string {
	if id == "" {
		return ""
	}
	if raw, i, ok := splitBucketEntryID(id, n); ok && i == home && !strings.HasSuffix(raw, ".") {
		return raw
	}
	return id + "."
}

// shownResvID reverses storedResvID.
func shownResvID(id string, home int) string {
	if id == "" {
		return ""
	}
	if s, ok := strings.CutSuffix(id, "."); ok {
		return s
	}
	return bucketEntryID(id, home)
}

func (s *Store) setResultBuckets(ctx context.Context, activity, user string, r admission.Result, n int) error {
	home := admission.HomeBucket(user, n)
	r.ReservationID = storedResvID(r.ReservationID, home, n)
	return s.setResultOn(ctx, activity, bucketID(activity, home, n), user, r)
}

func (s *Store) getResultBuckets(ctx context.Context, activity, user string, n int) (admission.Result, error) {
	home := admission.HomeBucket(user, n)
	r, err := s.getResultOn(ctx, activity, bucketID(activity, home, n), user)
	if err != nil {
		return admission.Result{}, err
	}
	r.ReservationID = shownResvID(r.ReservationID, home)
	for i := range r.Reservations {
		r.Reservations[i].ReservationID = shownResvID(r.Reservations[i].ReservationID, home)
	}
	return r, nil
}
