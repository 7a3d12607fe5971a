package admission

import "strings"

// A user's result records, as both stores keep them (lua/admit.lua and lua/set_result.lua do the
// same in Redis): the latest record, and once the user has had two reservations in the activity,
// the record of each reservation, oldest first.

// resultInFlight reports whether a record's reservation has yet to become a paid, cancelled or
// failed order.
func resultInFlight(code string) bool { return code == "queued" || code == "pending_payment" }

// FoldResult folds r, a new record of one reservation, into a user's latest record (top, when
// hasTop) and per-reservation records (list, nil until there are two reservations). A win (an
// admission) is always the latest; another record is unless the latest is another reservation
// still in flight.
func FoldResult(top Result, hasTop bool, list []Result, r Result, win bool) (Result, []Result) {
	if r.ReservationID != "" {
		if list == nil && hasTop && top.ReservationID != "" && top.ReservationID != r.ReservationID {
			list = []Result{WithoutReservations(top)}
		}
		if list != nil {
			list = putReservation(list, WithoutReservations(r))
		}
	}
	if win || !hasTop || top.ReservationID == "" || top.ReservationID == r.ReservationID || !resultInFlight(top.Code) {
		top = WithoutReservations(r)
	}
	return top, list
}

// putReservation replaces the record of r's reservation in list, or appends it and drops the
// oldest beyond MaxResultReservations.
func putReservation(list []Result, r Result) []Result {
	for i := range list {
		if list[i].ReservationID == r.ReservationID {
			list[i] = r
			return list
		}
	}
	list = append(list, r)
	if n := len(list) - MaxResultReservations; n > 0 {
		list = append(list[:0:0], list[n:]...)
	}
	return list
}

// WithoutReservations returns r without its per-reservation list: one reservation's record, as a
// list holds it and as a store saves the record of one reservation.
func WithoutReservations(r Result) Result {
	r.Reservations = nil
	return r
}

// CheckResultRecord refuses a reservation id the Redis store's list of ids could not hold.
func CheckResultRecord(r Result) error {
	if !validResultCode(r.Code) {
		return BadInput("result code %q", r.Code)
	}
	if strings.ContainsAny(r.ReservationID, " \x00") {
		return BadInput("reservation id %q contains a space or a NUL byte", r.ReservationID)
	}
	return nil
}
