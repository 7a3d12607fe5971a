package caddymodule

import (
	"errors"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// resultAnswer is the body of GET {prefix}/{activity}/result.
type resultAnswer struct {
	Code          string `json:"code"` // none, queued, pending_payment, paid, cancelled, failed
	ReservationID string `json:"reservation_id,omitempty"`
	OrderID       string `json:"order_id,omitempty"`
	PayBeforeMS   int64  `json:"pay_before_ms,omitempty"`
}

// result answers the caller's latest result record from the store, never from the order
// database: polling must not reach it.
func (q *request) result() error {
	if e := q.authenticate(); e != nil {
		return q.fail(e)
	}
	if e := q.limitUser(userBucketResult); e != nil {
		return q.fail(e)
	}
	res, err := q.h.app.backend.guard.GetResult(q.r.Context(), q.act.ID, q.user)
	switch {
	case errors.Is(err, admission.ErrNotFound):
		return q.ok(http.StatusOK, codeNone, resultAnswer{Code: codeNone})
	case errors.Is(err, admission.ErrUnknownActivity):
		return q.fail(apiError(http.StatusNotFound, codeNotFound, "no such activity"))
	case err != nil:
		q.h.logger.Debug("reading a result failed", zap.Error(err))
		return q.fail(errBusy(time.Second))
	}
	return q.ok(http.StatusOK, res.Code, resultAnswer{
		Code:          res.Code,
		ReservationID: res.ReservationID,
		OrderID:       res.OrderID,
		PayBeforeMS:   res.PayBeforeMS,
	})
}
