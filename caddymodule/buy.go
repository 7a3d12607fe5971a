package caddymodule

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/forwardsig"
)

// buyRequest is the optional body of POST {prefix}/{activity}/buy/{hash}.
type buyRequest struct {
	Qty *int64 `json:"qty"` // default 1
}

// appendBuyAnswer appends the 202 answer of a win, {"code":"queued","reservation_id","remaining"}
// and its newline, as encoding/json encodes it (TestBuyAnswerEncoding): the most frequent answer
// of a sale, written without reflection or boxing.
func appendBuyAnswer(b []byte, reservation string, remaining int64) []byte {
	b = append(b, `{"code":"`+codeQueued+`","reservation_id":`...)
	b = admission.AppendJSONString(b, reservation)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, remaining, 10)
	return append(b, "}\n"...)
}

// headerIdempotencyKey lets a client retry a buy safely: a retry with the same key (and user)
// gets the first answer back and takes no more stock.
const headerIdempotencyKey = "Idempotency-Key"

// buy takes the admission decision. Everything before the store call is node-local, cheapest
// first: window, sold-out flag, token, user limit, hashed path, input.
func (q *request) buy(next caddyhttp.Handler) error {
	a := q.act
	if e := q.open(true); e != nil && (e != errSoldOut || q.flagAnswers()) {
		return q.fail(e)
	}
	_, keyed := q.r.Header[headerIdempotencyKey]
	if e := q.authenticate(); e != nil {
		return q.fail(e)
	}
	if e := q.limitUser(userBucketBuy); e != nil {
		return q.fail(e)
	}
	if !q.h.app.urlKey.Verify(a.ID, q.user, a.Salt, q.call.arg) {
		return q.fail(errBadPath)
	}
	// A buyer whose waiting-room session is over buys nothing more, but a keyed press may be the
	// retry of a win whose answer was lost: only the store's replay of that key may answer it.
	replayOnly := false
	if e := q.admitted(); e != nil {
		if e != errTurnOver || !keyed {
			return q.fail(e)
		}
		replayOnly = true
	}
	reqID, e := requestID(q.r)
	if e != nil {
		return q.fail(e)
	}
	body, e := q.readBody()
	if e != nil {
		return q.fail(e)
	}
	qty, e := parseQty(body, a.Limit)
	if e != nil {
		return q.fail(e)
	}

	began := time.Now()
	var d admission.Decision
	var flagged bool
	var err error
	if replayOnly {
		d, err = q.h.app.backend.guard.Replay(q.r.Context(), a.ID, q.user, reqID)
		if errors.Is(err, admission.ErrNotFound) {
			return q.fail(errTurnOver) // no win of this key: the room's refusal stands
		}
	} else {
		// A client-chosen key may be the retry of a win: the guard then asks the store even
		// after the sell-out, so that the winner gets its first answer back.
		d, flagged, err = q.h.app.backend.guard.Decide(q.r.Context(), admission.Request{
			Activity: a.ID, User: q.user, Qty: qty, RequestID: reqID, MayReplay: keyed,
		})
	}
	if err != nil {
		e := q.admitError(err)
		q.h.app.metrics.observeAdmission(a.ID, e.Code, time.Since(began))
		return q.fail(e)
	}
	end := time.Now()
	q.h.app.metrics.observeAdmission(a.ID, d.Outcome.String(), end.Sub(began))
	remaining := d.Remaining
	switch {
	case d.Replayed: // a replay carries the stock of its first answer, which may be stale
	case !d.RemainingPartial:
		q.h.app.acts.setStock(a.ID, d.Remaining, end)
	case d.Outcome == admission.Won:
		// A split activity's win carries only its buyer's bucket's stock: the node's reading
		// of the whole goes down by the win, and the answer gives it.
		if n, ok := q.h.app.acts.took(a.ID, qty, d.Remaining); ok {
			remaining = n
		}
	}
	switch d.Outcome {
	case admission.Won:
	case admission.SoldOut:
		if flagged { // the Guard's node-local flag answered, not the store
			return q.fail(errSoldOut)
		}
		return q.fail(errSoldOutStore)
	case admission.LimitReached:
		return q.fail(errLimitReached)
	case admission.NotStarted:
		return q.fail(errNotStarted)
	case admission.Ended:
		return q.fail(errEnded)
	default:
		q.h.logger.Error("unknown admission outcome", zap.Stringer("outcome", d.Outcome))
		return q.fail(errBusyAt(layerStoreError, time.Second))
	}

	q.reservation = d.ReservationID // {http.seckill.reservation}
	q.code = codeQueued             // and {http.seckill.code} with it
	if q.h.Forward {
		// The signature vouches for the items the store took: a replay's are those of the win it
		// replays (d.Qty), not the retry's body's, which may ask for more.
		if d.Qty < 1 {
			q.h.logger.Error("admission won without its qty", zap.String("activity", a.ID),
				zap.String("reservation", d.ReservationID), zap.Bool("replayed", d.Replayed))
			return q.fail(errBusyAt(layerStoreError, time.Second))
		}
		// The next handler gets the body back, and headers only this handler could have set.
		q.r.Body = io.NopCloser(bytes.NewReader(body))
		q.r.ContentLength = int64(len(body))
		q.r.Header.Set("Content-Length", strconv.Itoa(len(body)))
		forwardsig.Set(q.r.Header, q.h.app.forwardSecret, forwardsig.Win{
			Reservation: d.ReservationID, Activity: a.ID, User: q.user, Qty: d.Qty,
		})
		return next.ServeHTTP(q.w, q.r)
	}
	buf := jsonBuffer()
	defer putJSONBuffer(buf)
	buf.Write(appendBuyAnswer(buf.AvailableBuffer(), d.ReservationID, remaining)) // in place
	writeBody(q.w, &q.hdrs, http.StatusAccepted, buf.Bytes(), strconv.Itoa(buf.Len()))
	return nil
}

// admitError maps a failed admission to its refusal. The breaker fails closed, so nothing is
// admitted without the store; but a call that timed out may have been carried out by the store and
// its answer lost, which is why the busy answer tells clients to retry with the same
// Idempotency-Key (the retry returns the first answer). The funnel counts the breaker's refusals
// (no store call made) apart from the store's failures.
func (q *request) admitError(err error) *Error {
	switch {
	case errors.Is(err, admission.ErrUnknownActivity):
		return errNoActivity
	case errors.Is(err, admission.ErrBadInput):
		return errBadRequest("the request cannot be admitted as given")
	case errors.Is(err, admission.ErrContended):
		// Stock is left in other buckets of a split activity: try again, never sold_out. The
		// store answered, so neither the breaker nor the store_error layer counts it.
		q.h.logger.Debug("admission contended", zap.Error(err))
		return errBusyAt(layerContended, time.Second)
	case errors.Is(err, admission.ErrBusy), errors.Is(err, context.Canceled):
		q.h.logger.Debug("admission refused: store unavailable", zap.Error(err))
	default:
		q.h.logger.Warn("admission failed", zap.Error(err))
	}
	return errBusyAt(storeFailureLayer(err), time.Second)
}

// storeFailureLayer is the funnel layer of a failed store call that answers 503 busy: the breaker
// when it refused the call (no store call made), canceled when the client went away, and the
// store itself otherwise. Admission, result and status reads all go through the breaker.
func storeFailureLayer(err error) layer {
	switch {
	case errors.Is(err, context.Canceled):
		return layerCanceled // the client is gone; nobody reads the answer
	case admission.BreakerRefused(err):
		return layerBreaker
	case errors.Is(err, admission.ErrNotReplicated):
		return layerReplicasAck // decided on the master: "unknown", not "no"
	}
	return layerStoreError
}

// requestID returns the request's idempotency key, or a random one when it has none.
func requestID(r *http.Request) (string, *Error) {
	vals := r.Header.Values(headerIdempotencyKey)
	if len(vals) == 0 {
		var b [16]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms.
		return hex.EncodeToString(b[:]), nil
	}
	k := vals[0]
	if len(vals) > 1 || k == "" || len(k) > admission.MaxRequestIDLen {
		return "", errBadRequest("Idempotency-Key must be one value of 1-" +
			strconv.Itoa(admission.MaxRequestIDLen) + " characters")
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return "", errBadRequest("Idempotency-Key must be printable ASCII")
		}
	}
	return k, nil
}

// flagAnswers reports whether the node's sold-out flag, found set, answers this buy without a
// store call: the press has no Idempotency-Key or, once the node knows the request ids of the wins
// still held, a key that is none of them. A keyed press may be the retry of a win whose answer
// was lost, which must get that first answer back; the key alone (random, the winner's own)
// decides, before the token is verified, so the answer tells nothing about the user.
func (q *request) flagAnswers() bool {
	keys, keyed := q.r.Header[headerIdempotencyKey]
	return !keyed || len(keys) == 1 && q.h.app.backend.guard.RefusesReplay(q.act.ID, keys[0])
}

// parseQty reads the optional {"qty": n} body: 1 when absent, and from 1 to limit.
func parseQty(body []byte, limit int64) (int64, *Error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return 1, nil
	}
	var req buyRequest
	if err := decodeJSON(body, &req); err != nil {
		return 0, errBadRequest(err.Error())
	}
	if req.Qty == nil {
		return 1, nil
	}
	if *req.Qty < 1 || *req.Qty > limit {
		return 0, errBadRequest("qty must be from 1 to " + strconv.FormatInt(limit, 10))
	}
	return *req.Qty, nil
}
