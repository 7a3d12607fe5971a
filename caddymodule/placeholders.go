package caddymodule

// Placeholders the handler sets, for logs, handle_errors and the handlers after it.
const (
	placeholderCode        = "http.seckill.code"        // the answer's machine word: queued, sold_out, ...
	placeholderMessage     = "http.seckill.message"     // the refusal's human-readable message
	placeholderActivity    = "http.seckill.activity"    // the activity id of the call
	placeholderUser        = "http.seckill.user"        // the authenticated user id
	placeholderReservation = "http.seckill.reservation" // the reservation id of a win
)

// The verified token's claims are {http.seckill.claims.<name>}; see request.claimPlaceholder.

// placeholder answers the placeholders of the request's own values through the replacer's Map,
// so that none is boxed into the replacer's map for requests that never read them: the activity
// once the call is parsed, the user once authenticated, the reservation once won, the answer's
// code once answered, a refusal's message; and the claims (claimPlaceholder). A value Set on the
// replacer (a later handler's) wins: the replacer asks its static values first.
func (q *request) placeholder(key string) (any, bool) {
	switch key {
	case placeholderCode:
		return q.code, q.code != ""
	case placeholderMessage:
		switch {
		case q.refusal == nil:
			return nil, false
		case q.refusal.message != nil: // a shared refusal's, boxed once
			return q.refusal.message, true
		}
		return q.refusal.Message, true
	case placeholderActivity:
		return q.call.activity, q.call.activity != ""
	case placeholderUser:
		return q.user, q.user != ""
	case placeholderReservation:
		return q.reservation, q.reservation != ""
	}
	return q.claimPlaceholder(key)
}
