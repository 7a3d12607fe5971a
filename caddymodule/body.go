package caddymodule

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
)

// maxBody bounds every request body the handler reads.
const maxBody = 1 << 20

// readBody reads the whole request body, at most maxBody bytes (413 beyond). A request that
// declares an empty body (Content-Length: 0) is not read: Caddy wraps even an empty body in a
// reader that re-arms the connection's read deadline on every Read, which a buy without a body
// would pay for nothing.
func (q *request) readBody() ([]byte, *Error) {
	if q.r.Body == nil || q.r.Body == http.NoBody || q.r.ContentLength == 0 {
		return nil, nil
	}
	b, err := io.ReadAll(http.MaxBytesReader(q.w, q.r.Body, maxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, errTooLarge
		}
		return nil, errBadRequest("reading the request body failed")
	}
	return b, nil
}

// decodeJSON decodes one JSON object into v; trailing data after it is an error. The error is the
// client's 400 message (jsonError).
func decodeJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("the body has data after its JSON object")
	}
	return nil
}
