package caddymodule

import (
	"net/http"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// open runs the node-local checks that need neither a token nor the store: the activity window on
// this node's clock, and the sold-out flag. The store decides the window again on its own clock;
// this pre-check only spares it the requests that are certainly early or late. With started,
// the call needs the window to have opened (buy); otherwise it needs only that it has not ended
// (captcha). The path call has its own check, as it opens reveal before start.
func (q *request) open(started bool) *Error {
	a := q.act
	if started && q.now.Before(a.Start) {
		return errNotStarted
	}
	if !q.now.Before(a.End) {
		return errEnded
	}
	if q.h.app.backend.guard.SoldOut(a.ID) {
		return errSoldOut
	}
	return nil
}

// originalPath is the request path as the client sent it, before rewrites.
func originalPath(r *http.Request) string {
	if or, ok := r.Context().Value(caddyhttp.OriginalRequestCtxKey).(http.Request); ok && or.URL != nil {
		return or.URL.Path
	}
	return r.URL.Path
}
