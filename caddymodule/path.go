package caddymodule

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/captcha"
)

// pathRequest is the body of POST {prefix}/{activity}/path.
type pathRequest struct {
	CaptchaID string `json:"captcha_id"`
	Answer    string `json:"answer"`
}

// pathAnswer is its answer: the caller's own buy path.
type pathAnswer struct {
	Code string `json:"code"`
	Path string `json:"path"`
}

// path hands the caller its hashed buy path, from reveal before the start, once the captcha is
// answered. The path is an HMAC of the activity, the user and the activity's secret salt: it
// cannot be guessed before it is revealed, nor used by another user.
func (q *request) path() error {
	a := q.act
	if q.now.Before(a.Start.Add(-a.reveal)) {
		return q.fail(errNotRevealed)
	}
	if e := q.open(false); e != nil {
		return q.fail(e)
	}
	if e := q.authenticate(); e != nil {
		return q.fail(e)
	}
	if e := q.limitUser(userBucketBuy); e != nil {
		return q.fail(e)
	}
	if e := q.admitted(); e != nil {
		return q.fail(e)
	}
	// The body is read and checked whatever the captcha setting: the documented limits (1 MiB,
	// valid JSON) hold for every call that takes one.
	body, e := q.readBody()
	if e != nil {
		return q.fail(e)
	}
	empty := len(bytes.TrimSpace(body)) == 0
	var req pathRequest
	if !empty {
		if err := decodeJSON(body, &req); err != nil {
			return q.fail(errBadRequest(err.Error()))
		}
	}
	if iss := q.h.app.issuer; iss != nil {
		if empty {
			return q.fail(errBadRequest(`the body must be {"captcha_id": "...", "answer": "..."}`))
		}
		if req.CaptchaID == "" || req.Answer == "" || len(req.CaptchaID) > maxPathArg || len(req.Answer) > maxPathArg {
			return q.fail(errBadRequest("captcha_id and answer are required"))
		}
		ok, err := iss.Verify(q.r.Context(), req.CaptchaID, q.user, q.act.ID, req.Answer)
		switch {
		case errors.Is(err, captcha.ErrNotFound):
			return q.fail(errCaptcha)
		case err != nil:
			q.h.logger.Warn("verifying a captcha failed", zap.Error(err))
			return q.fail(errBusyAt(layerCaptcha, time.Second))
		case !ok:
			return q.fail(errCaptcha)
		}
	}
	return q.ok(http.StatusOK, codeOK, pathAnswer{Code: codeOK, Path: q.buyPath()})
}

// buyPath is the caller's public path of the buy call: the original request path with its last
// segment "path" replaced, so it is right whatever the mount, ending in the caller's hash. It is
// built in a stack buffer and copied once.
func (q *request) buyPath() string {
	var buf [256]byte
	b := buf[:0]
	if p, ok := strings.CutSuffix(originalPath(q.r), "/path"); ok {
		b = append(b, p...)
	} else {
		b = append(append(append(b, q.h.prefix...), '/'), q.act.ID...)
	}
	b = append(b, "/buy/"...)
	return string(q.h.app.urlKey.AppendSign(b, q.act.ID, q.user, q.act.Salt))
}
