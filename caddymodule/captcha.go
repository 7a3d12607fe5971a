package caddymodule

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/captcha"
)

// captchaAnswer is the body of POST {prefix}/{activity}/captcha.
type captchaAnswer struct {
	Code      string `json:"code"`
	CaptchaID string `json:"captcha_id"`
	Image     string `json:"image"` // URL of the PNG
	Audio     string `json:"audio"` // URL of the WAV, the same digits spoken
}

var errCaptchaOff = refuseAt(layerRoute, http.StatusNotFound, codeNotFound, "the captcha is off for this sale")

// captcha issues a captcha to the caller. It may be asked for before the sale starts, so that
// buyers can solve it while they wait for the buy path.
func (q *request) captcha() error {
	iss := q.h.app.issuer
	if iss == nil {
		return q.fail(errCaptchaOff)
	}
	if e := q.open(false); e != nil {
		return q.fail(e)
	}
	if e := q.authenticate(); e != nil {
		return q.fail(e)
	}
	// The issuance limit first: it is node-local, so a refused call costs no distributed limiter
	// round trip and none of the user's buying budget.
	if e := q.limitCaptchaIssue(); e != nil {
		return q.fail(e)
	}
	if e := q.limitUser(userBucketBuy); e != nil {
		return q.fail(e)
	}
	id, err := iss.New(q.r.Context(), q.user, q.act.ID)
	if err != nil {
		q.h.logger.Warn("issuing a captcha failed", zap.Error(err))
		return q.fail(errBusyAt(layerCaptcha, time.Second))
	}
	return q.ok(http.StatusOK, codeOK, captchaAnswer{
		Code: codeOK, CaptchaID: id, Image: q.mediaURL(id, captchaPNG), Audio: q.mediaURL(id, captchaWAV),
	})
}

// captchaMediaKind is one of the two forms a captcha is fetched in.
type captchaMediaKind struct {
	ext         string // ".png" or ".wav"
	contentType string
	render      func(*captcha.Issuer, context.Context, string) ([]byte, error)
}

var (
	captchaPNG = captchaMediaKind{".png", "image/png", (*captcha.Issuer).Image}
	captchaWAV = captchaMediaKind{".wav", "audio/wav", (*captcha.Issuer).Audio}
)

// mediaURL is the public URL of a captcha's image or audio: the original request path (before
// any rewrite or handle_path strip) extended by the id, so it is right whatever the mount.
func (q *request) mediaURL(id string, kind captchaMediaKind) string {
	if p := originalPath(q.r); strings.HasSuffix(p, "/captcha") {
		return p + "/" + id + kind.ext
	}
	return q.h.prefix + "/" + q.act.ID + "/captcha/" + id + kind.ext
}

// captchaMedia serves a captcha's PNG or WAV. It needs no token (an img or audio tag cannot send
// one); the captcha store caps how often one captcha is fetched, image and audio together.
func (q *request) captchaMedia(kind captchaMediaKind) error {
	iss := q.h.app.issuer
	if iss == nil {
		return q.fail(errCaptchaOff)
	}
	body, err := kind.render(iss, q.r.Context(), q.call.arg)
	switch {
	case errors.Is(err, captcha.ErrNotFound), errors.Is(err, captcha.ErrTooManyFetches):
		return q.fail(refuseAt(layerCaptcha, http.StatusNotFound, codeNotFound, "no such captcha, or it was fetched too often"))
	case err != nil:
		q.h.logger.Warn("fetching a captcha failed", zap.String("form", kind.ext), zap.Error(err))
		return q.fail(errBusyAt(layerCaptcha, time.Second))
	}
	q.code = codeOK
	q.repl.Set(placeholderCode, codeOK)
	h := q.w.Header()
	h.Set("Content-Type", kind.contentType)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	q.w.WriteHeader(http.StatusOK)
	_, _ = q.w.Write(body)
	return nil
}
