package caddymodule

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// Error is a refusal of the public API: an HTTP status and the stable machine word of docs/api.md
// ("sold_out", "bad_path", ...). Handlers return it wrapped in a caddyhttp.HandlerError, so
// handle_errors routes can find it with errors.As.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`

	// RetryAfter, when positive, is sent as the Retry-After header (whole seconds, rounded up).
	RetryAfter time.Duration `json:"-"`

	// layer is the funnel layer that made the refusal, counted by request.fail. It rides on the
	// value so that counting happens in one place, not at every call site; layerNone for the
	// answers of the other handlers, which are not counted.
	layer layer

	// The refusals shared by every request (sharedError) are encoded once: body is the JSON
	// answer, and code and message are Code and Message ready for the replacer.
	body          *encodedBody
	code, message any
}

// encodedBody is a JSON answer with its trailing newline and its Content-Length.
type encodedBody struct {
	b   []byte
	len string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// The stable machine words of the public contract.
const (
	codeOK               = "ok"
	codeQueued           = "queued"
	codeNone             = "none"
	codeUnauthorized     = "unauthorized"
	codeNotStarted       = "not_started"
	codeEnded            = "ended"
	codeCaptchaInvalid   = "captcha_invalid"
	codeBadPath          = "bad_path"
	codeNotFound         = "not_found"
	codeMethodNotAllowed = "method_not_allowed"
	codeLimitReached     = "limit_reached"
	codeSoldOut          = "sold_out"
	codeBadRequest       = "bad_request"
	codeRateLimited      = "rate_limited"
	codeBusy             = "busy"
	codeForbidden        = "forbidden"
	codeNotAdmitted      = "not_admitted"
	codeNotInLine        = "not_in_line"
)

// layer is a layer of the funnel (caddymodule/README.md) that can refuse a call of the public API, for
// caddy_seckill_rejected_total{layer}. The constants are in the funnel order
// (a call meets only some, not always in exactly this order; caddymodule/README.md); each
// layer's counter is resolved once, when the metrics are registered (metrics.rejected).
type layer uint8

const (
	layerNone         layer = iota // not counted: the answers of the other handlers
	layerRoute                     // 404 not_found, 405: no such call, activity or captcha
	layerIPLimit                   // 429: the client address's bucket
	layerWindow                    // 403 not_started / ended: this node's clock or the store's
	layerSoldOutFlag               // 410: the node-local sold-out flag (the Guard's too), no store call
	layerJWT                       // 401, or 503 when the verifier cannot work (JWKS down)
	layerUserLimit                 // 429: the user's bucket, local or distributed
	layerHashedURL                 // 404 bad_path, no store call
	layerWaitingRoom               // 403 not_admitted, 404 not_in_line, the pow_* refusals: the waiting room (queue.go)
	layerCaptchaLimit              // 429: the user's captcha issuance bucket
	layerCaptcha                   // 403 captcha_invalid, 404 image, 503 captcha store down
	layerBadRequest                // 400 / 408 / 413 bad_request: the Idempotency-Key or the body
	layerBreaker                   // 503 busy: the store's circuit breaker refused the call
	layerStoreError                // 503 busy: the store call failed or timed out
	layerReplicasAck               // 503 busy: the store decided, too few replicas confirmed in time
	layerCanceled                  // 503 busy: the client went away while the store decided
	layerContended                 // 503 busy: a split activity's stock went to others first
	layerStoreSoldOut              // 410: the admission script's decision
	layerLimitReached              // 409: the admission script's decision
	nLayers
)

// layerNames are the values of the layer label: short and stable, as dashboards use them.
var layerNames = [nLayers]string{
	layerRoute:        "route",
	layerIPLimit:      "ip_limit",
	layerWindow:       "window",
	layerSoldOutFlag:  "sold_out_flag",
	layerJWT:          "jwt",
	layerUserLimit:    "user_limit",
	layerHashedURL:    "hashed_url",
	layerWaitingRoom:  "waiting_room",
	layerCaptchaLimit: "captcha_limit",
	layerCaptcha:      "captcha",
	layerBadRequest:   "bad_request",
	layerBreaker:      "breaker",
	layerStoreError:   "store_error",
	layerReplicasAck:  "replicas_ack",
	layerCanceled:     "canceled",
	layerContended:    "contended",
	layerStoreSoldOut: "store_sold_out",
	layerLimitReached: "limit_reached",
}

func (l layer) String() string { return layerNames[l] }

// RejectedLayers returns the values of the layer label of caddy_seckill_rejected_total, in the
// funnel order: the watch command (package seckillcmd) shows a cell for each.
func RejectedLayers() []string {
	return append([]string(nil), layerNames[layerNone+1:]...)
}

// apiError builds a refusal that no funnel layer counts (the other handlers' answers); the public
// API's refusals are built by refuseAt.
func apiError(status int, code, msg string) *Error {
	return &Error{Status: status, Code: code, Message: msg}
}

// refuseAt builds a refusal of the public API made by layer l.
func refuseAt(l layer, status int, code, msg string) *Error {
	return &Error{Status: status, Code: code, Message: msg, layer: l}
}

// sharedError is refuseAt for a refusal many requests share (and none modifies): its answer is
// encoded once. The sold-out answer is most of what a node sends after a sell-out.
func sharedError(l layer, status int, code, msg string) *Error {
	e := refuseAt(l, status, code, msg)
	b, err := json.Marshal(e)
	if err != nil {
		panic(fmt.Sprintf("encoding refusal %s: %v", code, err)) // a plain struct; cannot happen
	}
	e.body = newEncodedBody(b)
	e.code, e.message = e.Code, e.Message
	return e
}

func newEncodedBody(b []byte) *encodedBody {
	b = append(b, '\n')
	return &encodedBody{b: b, len: strconv.Itoa(len(b))}
}

// Refusals shared by several calls. The sold-out answer has two values with the same body: one
// for the node-local flag and one for the store's decision, which the funnel counts apart.
var (
	errNotFound     = sharedError(layerRoute, http.StatusNotFound, codeNotFound, "no such activity or call")
	errNoActivity   = sharedError(layerRoute, http.StatusNotFound, codeNotFound, "no such activity")
	errBadPath      = sharedError(layerHashedURL, http.StatusNotFound, codeBadPath, "this buy path is not yours or not valid")
	errSoldOut      = sharedError(layerSoldOutFlag, http.StatusGone, codeSoldOut, "the activity is sold out")
	errSoldOutStore = sharedError(layerStoreSoldOut, http.StatusGone, codeSoldOut, "the activity is sold out")
	errNotStarted   = sharedError(layerWindow, http.StatusForbidden, codeNotStarted, "the activity has not started")
	errNotRevealed  = sharedError(layerWindow, http.StatusForbidden, codeNotStarted, "the buy path is not revealed yet")
	errEnded        = sharedError(layerWindow, http.StatusForbidden, codeEnded, "the activity has ended")
	errLimitReached = sharedError(layerLimitReached, http.StatusConflict, codeLimitReached, "you already hold as many items as allowed")
	errCaptcha      = sharedError(layerCaptcha, http.StatusForbidden, codeCaptchaInvalid, "the captcha answer is wrong or expired")
	errTooLarge     = sharedError(layerBadRequest, http.StatusRequestEntityTooLarge, codeBadRequest, "the request body is too large")
)

// errBusy is the 503 busy answer of the handlers outside the public API; see errBusyAt.
func errBusy(retryAfter time.Duration) *Error { return errBusyAt(layerNone, retryAfter) }

// errBusyAt is the 503 busy answer of layer l.
func errBusyAt(l layer, retryAfter time.Duration) *Error {
	e := refuseAt(l, http.StatusServiceUnavailable, codeBusy, "the sale is busy, try again shortly")
	e.RetryAfter = retryAfter
	return e
}

// errBodyTimeout is the 408 answer to a body that did not arrive within the app's body_timeout.
func errBodyTimeout(timeout time.Duration) *Error {
	return refuseAt(layerBadRequest, http.StatusRequestTimeout, codeBadRequest,
		"the request body did not arrive within "+timeout.String())
}

func errBadRequest(msg string) *Error {
	return refuseAt(layerBadRequest, http.StatusBadRequest, codeBadRequest, msg)
}

func errUnauthorized(msg string) *Error {
	return refuseAt(layerJWT, http.StatusUnauthorized, codeUnauthorized, msg)
}

// Error modes of the handler (see Handler.Errors).
const (
	errorsAuto   = "auto"
	errorsWrite  = "write"
	errorsReturn = "return"
)

// fail answers a refusal in the handler's error mode; see answerError.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, e *Error) error {
	return answerError(h.Errors, w, r, e)
}

// answerError answers a refusal for any handler of this package, in error mode (Errors "auto",
// "write" or "return"), and sets {http.seckill.code} and {http.seckill.message} to its code and
// message; see answerRefusal.
func answerError(mode string, w http.ResponseWriter, r *http.Request, e *Error) error {
	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		if e.code != nil {
			repl.Set(placeholderCode, e.code)
			repl.Set(placeholderMessage, e.message)
		} else {
			repl.Set(placeholderCode, e.Code)
			repl.Set(placeholderMessage, e.Message)
		}
	}
	return answerRefusal(mode, w, r, e, nil)
}

// answerRefusal is answerError without the placeholders, for a caller whose own placeholders
// answer them (request.fail), and hv, when not nil, holds the answer's header values
// (writeBody). The JSON body is written here unless errors are to be returned to Caddy
// ("return", or "auto" on a server with handle_errors routes), in which case the refusal becomes a
// caddyhttp.HandlerError that handle_errors can restyle; the response headers set here
// (Retry-After, WWW-Authenticate, and whatever the caller set, such as Allow) stay on the response
// either way.
func answerRefusal(mode string, w http.ResponseWriter, r *http.Request, e *Error, hv *answerHeaders) error {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", retryAfterSeconds(e.RetryAfter))
	}
	if e.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="seckill"`)
	}
	if returnErrors(mode, r) {
		return caddyhttp.Error(e.Status, e)
	}
	if e.body != nil {
		writeBody(w, hv, e.Status, e.body.b, e.body.len)
		return nil
	}
	writeJSON(w, hv, e.Status, e)
	return nil
}

// returnErrors reports whether refusals go to Caddy's error handling rather than being written.
func returnErrors(mode string, r *http.Request) bool {
	switch mode {
	case errorsReturn:
		return true
	case errorsWrite:
		return false
	}
	srv, ok := r.Context().Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	return ok && srv.Errors != nil && len(srv.Errors.Routes) > 0
}

// validErrorsMode checks an Errors setting ("" is auto).
func validErrorsMode(mode string) error {
	switch mode {
	case "", errorsAuto, errorsWrite, errorsReturn:
		return nil
	}
	return fmt.Errorf("errors %q: want auto, write or return", mode)
}

// serveError writes the JSON body of the error being handled when the handler runs inside
// handle_errors, so a site can restyle some refusals and leave the others to the default body.
func serveError(w http.ResponseWriter, err error) {
	var e *Error
	if !errors.As(err, &e) {
		status := http.StatusInternalServerError
		var he caddyhttp.HandlerError
		if errors.As(err, &he) && he.StatusCode != 0 {
			status = he.StatusCode
		}
		e = apiError(status, codeForStatus(status), http.StatusText(status))
	}
	writeJSON(w, nil, e.Status, e)
}

// codeForStatus names errors that did not come from this handler.
func codeForStatus(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusRequestTimeout, http.StatusRequestEntityTooLarge:
		return codeBadRequest
	case http.StatusUnauthorized:
		return codeUnauthorized
	case http.StatusNotFound:
		return codeNotFound
	case http.StatusMethodNotAllowed:
		return codeMethodNotAllowed
	case http.StatusTooManyRequests:
		return codeRateLimited
	case http.StatusServiceUnavailable:
		return codeBusy
	}
	return "error"
}

// retryAfterSeconds formats a wait as whole seconds, rounded up and at least 1, as Retry-After
// wants (a client retrying at 0 would only be refused again).
func retryAfterSeconds(d time.Duration) string {
	s := int64((d + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return strconv.FormatInt(s, 10)
}

// writeJSON writes v as the JSON body of a response that must not be stored by shared caches
// unless the caller said otherwise; hv is writeBody's.
func writeJSON(w http.ResponseWriter, hv *answerHeaders, status int, v any) {
	buf := jsonBuffer()
	defer putJSONBuffer(buf)
	// Encode, unlike Marshal, ends the answer with the newline in place and leaves it in a buffer
	// this package reuses: one copy and one allocation less per answer.
	if err := json.NewEncoder(buf).Encode(v); err != nil {
		// Every value written here is a plain struct; failing to encode one is a programming error.
		buf.Reset()
		buf.WriteString(`{"code":"error","message":"encoding the answer failed"}` + "\n")
		status = http.StatusInternalServerError
	}
	writeBody(w, hv, status, buf.Bytes(), strconv.Itoa(buf.Len()))
}

// jsonBuffers holds the buffers the JSON answers are written into (jsonBuffer).
var jsonBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// jsonBuffer returns an empty pooled buffer for an answer; putJSONBuffer gives it back once the
// answer is written.
func jsonBuffer() *bytes.Buffer {
	buf := jsonBuffers.Get().(*bytes.Buffer)
	buf.Reset()
	return buf
}

// putJSONBuffer keeps buf for another answer, unless it grew past maxPooledJSON (a large admin
// listing): that one is left to the collector.
func putJSONBuffer(buf *bytes.Buffer) {
	if buf.Cap() <= maxPooledJSON {
		jsonBuffers.Put(buf)
	}
}

const maxPooledJSON = 16 << 10

// answerHeaders are the values of the headers every JSON answer carries (writeBody). They share
// one backing array, where Header.Set makes one allocation per header; a request keeps it in its
// own allocation (request.hdrs), so that an answer of the public API allocates none.
type answerHeaders [4]string

// writeBody writes a JSON body (with its trailing newline) and its headers, their values in hv
// (a new array when nil), which the response's header map then holds: one answer per array. Each
// value is capped at its length, so that a later Add copies rather than writes into its neighbour.
func writeBody(w http.ResponseWriter, hv *answerHeaders, status int, body []byte, contentLength string) {
	h := w.Header()
	if hv == nil {
		hv = new(answerHeaders)
	}
	*hv = answerHeaders{"application/json", "nosniff", "no-store", contentLength}
	v := hv[:]
	h["Content-Type"] = v[0:1:1]
	h["X-Content-Type-Options"] = v[1:2:2]
	if len(h["Cache-Control"]) == 0 || h["Cache-Control"][0] == "" {
		h["Cache-Control"] = v[2:3:3]
	}
	h["Content-Length"] = v[3:4:4]
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
