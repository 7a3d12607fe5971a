package caddymodule

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// maxBody bounds every request body the handler reads.
const maxBody = 1 << 20

// readBody reads the whole request body, at most maxBody bytes (413 beyond). A request that
// declares an empty body (Content-Length: 0) is not read: Caddy wraps even an empty body in a
// reader that re-arms the connection's read deadline on every Read, which a buy without a body
// would pay for nothing.
//
// The body must have arrived by the deadline ServeHTTP armed (armBodyDeadline): 408 otherwise.
// Once it is read the deadline is lifted, so that net/http's watch for a closed connection, which
// starts at the body's end, does not cancel the request while the store decides.
func (q *request) readBody() ([]byte, *Error) {
	if !hasBody(q.r) {
		return nil, nil
	}
	b, err := io.ReadAll(http.MaxBytesReader(q.w, q.r.Body, maxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			return nil, errTooLarge
		case errors.Is(err, os.ErrDeadlineExceeded):
			return nil, errBodyTimeout(q.h.app.bodyTimeout)
		}
		return nil, errBadRequest("reading the request body failed")
	}
	_ = http.NewResponseController(q.w).SetReadDeadline(time.Time{})
	return b, nil
}

// hasBody reports whether r carries a body to read (chunked, or a Content-Length above 0).
func hasBody(r *http.Request) bool {
	return r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
}

// armBodyDeadline gives the body of r, if it has one, until timeout from now to arrive, whether
// the handler reads it or not: net/http reads an unread body before it answers, so a client
// trickling one would otherwise hold the connection, and the answer, as long as it likes. A
// writer that cannot set read deadlines (none of Caddy's) leaves the body unbounded.
func armBodyDeadline(w http.ResponseWriter, r *http.Request, timeout time.Duration) {
	if hasBody(r) {
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(timeout))
	}
}

// decodeJSON decodes one JSON object into v; trailing data after it is an error. The error is the
// client's 400 message (jsonError).
func decodeJSON(b []byte, v any) error {
	return decodeJSONObject(b, v, false)
}

// decodeStrictJSON is decodeJSON that also refuses a member v has no field for: the admin API's
// bodies, where a misspelt member ("limt") would otherwise leave its setting at the default and
// change the store all the same.
func decodeStrictJSON(b []byte, v any) error {
	return decodeJSONObject(b, v, true)
}

func decodeJSONObject(b []byte, v any, strict bool) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok && strict {
			return fmt.Errorf("the body has a member %s that is not one of this call's", name)
		}
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("the body has data after its JSON object")
	}
	return nil
}
