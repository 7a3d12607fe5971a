package caddymodule

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// resultNone is the answer of a user with no result record: {"code":"none"}.
var resultNone = newEncodedBody([]byte(`{"code":"none"}`))

// result answers the caller's latest result record from the store, never from the order
// database: polling must not reach it. The answer is the record as encoding/json encodes an
// admission.Result ({code, reservation_id?, order_id?, pay_before_ms?}, docs/api.md), which the
// store appends as it is (Store.AppendResult): a winner polls many times per win, and the Redis
// store keeps the record in that very encoding, so a poll neither decodes nor encodes it.
func (q *request) result() error {
	if e := q.authenticate(); e != nil {
		return q.fail(e)
	}
	if e := q.limitUser(userBucketResult); e != nil {
		return q.fail(e)
	}
	// The record is appended into the answers' pooled buffers, not a pool of its own.
	buf := jsonBuffer()
	defer putJSONBuffer(buf)
	b, code, err := q.h.app.backend.guard.AppendResult(q.r.Context(), buf.AvailableBuffer(), q.act.ID, q.user)
	switch {
	case errors.Is(err, admission.ErrNotFound):
		// The activity was resolved by this node: a miss is a user with no record (an activity
		// deleted from the store since is answered the same until the node's view refreshes).
		q.code = codeNone
		writeBody(q.w, &q.hdrs, http.StatusOK, resultNone.b, resultNone.len)
		return nil
	case errors.Is(err, admission.ErrUnknownActivity):
		return q.fail(errNoActivity)
	case err != nil:
		q.h.logger.Debug("reading a result failed", zap.Error(err))
		return q.fail(errBusyAt(storeFailureLayer(err), time.Second))
	}
	buf.Write(b) // in place unless the record outgrew the buffer
	buf.WriteByte('\n')
	q.code = code
	writeBody(q.w, &q.hdrs, http.StatusOK, buf.Bytes(), strconv.Itoa(buf.Len()))
	return nil
}
