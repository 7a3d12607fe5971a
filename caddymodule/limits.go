package caddymodule

import (
	"net/http"
	"strconv"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/ratelimit"
)

// Buckets of the user rate limit: result polling has its own, so that a buyer waiting for the
// outcome does not spend the budget of the calls that buy.
const (
	userBucketBuy    = "u:"
	userBucketResult = "r:"
)

// limitIP takes one event from the client address's bucket. The address is Caddy's client_ip,
// which honours the server's trusted_proxies; headers are never trusted here. A request without
// one (a Unix-socket listener without trusted_proxies_unix) is not limited: one bucket shared by
// every buyer would refuse the whole sale after its first presses. That is logged once.
func (q *request) limitIP() *Error {
	l := q.h.app.ipLimit
	if l == nil {
		return nil
	}
	key, ok := clientIPKey(q.r)
	if !ok {
		q.h.noClientIP.Do(func() {
			q.h.logger.Warn("rate_limit ip does not apply: a request has no client address (a Unix socket "+
				"listener? set the server's trusted_proxies_unix and client_ip_headers)",
				zap.String("remote_addr", q.r.RemoteAddr))
		})
		return nil
	}
	return q.rateLimited(layerIPLimit, l.Rate(), l.Allow(key, q.now))
}

// clientIPKey returns the rate-limit key of the request's client address, false when it has
// none.
func clientIPKey(r *http.Request) (string, bool) {
	s, _ := caddyhttp.GetVar(r.Context(), caddyhttp.ClientIPVarKey).(string)
	return ratelimit.IPKeyString(s)
}

// limitUser takes one event from the authenticated user's bucket: the node-local one first (it
// costs nothing), then, when configured, the distributed one. A failing distributed limiter falls
// back to the local decision: the admission itself is still guarded by the store's breaker.
func (q *request) limitUser(bucket string) *Error {
	a := q.h.app
	if a.userLimit == nil {
		return nil
	}
	rate := a.userLimit.Rate()
	// The key is built twice rather than kept: the local limiter's may then stay on the stack.
	d := a.userLimit.Allow(bucket+q.user, q.now)
	if d.Allowed && a.userGCRA != nil {
		gd, err := a.userGCRA.Allow(q.r.Context(), bucket+q.user, rate)
		if err != nil {
			q.h.logger.Warn("distributed user rate limit unavailable; using the local one", zap.Error(err))
		} else {
			d = gd
		}
	}
	return q.rateLimited(layerUserLimit, rate, d)
}

// limitCaptchaIssue takes one event from the user's captcha issuance bucket. It applies whether or
// not a user limit is configured: a captcha costs milliseconds of CPU to render, the most
// expensive thing an authenticated caller can ask this node for.
func (q *request) limitCaptchaIssue() *Error {
	l := q.h.app.captchaLimit
	if l == nil {
		return nil
	}
	return q.rateLimited(layerCaptchaLimit, l.Rate(), l.Allow(q.user, q.now))
}

// rateLimited returns nil for an allowed event, and otherwise layer l's 429 refusal with its
// headers: Retry-After, and RateLimit-Policy / RateLimit as in draft-ietf-httpapi-ratelimit-headers.
func (q *request) rateLimited(l layer, rate ratelimit.Rate, d ratelimit.Decision) *Error {
	if d.Allowed {
		return nil
	}
	h := q.w.Header()
	h.Set("RateLimit-Policy", rate.Policy())
	h.Set("RateLimit", "limit="+strconv.Itoa(rate.Burst)+", remaining="+strconv.Itoa(d.Remaining)+
		", reset="+retryAfterSeconds(d.Reset))
	e := refuseAt(l, http.StatusTooManyRequests, codeRateLimited, "too many requests, slow down")
	e.RetryAfter = d.RetryAfter
	return e
}
