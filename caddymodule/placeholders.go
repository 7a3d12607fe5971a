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
