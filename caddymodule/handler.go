package caddymodule

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/jwtauth"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// Handler answers the public flash-sale API (docs/api.md) under Prefix:
//
//	GET  {prefix}/{activity}                  status (no auth, cacheable 1 s)
//	POST {prefix}/{activity}/captcha          a captcha for the caller (JWT)
//	GET  {prefix}/{activity}/captcha/{id}.png the captcha image
//	GET  {prefix}/{activity}/captcha/{id}.wav the captcha's digits spoken (WAV)
//	POST {prefix}/{activity}/path             the caller's hashed buy path (JWT, captcha answer)
//	POST {prefix}/{activity}/buy/{hash}       the admission (JWT): 202 queued
//	GET  {prefix}/{activity}/result           the caller's result record (JWT)
//	POST {prefix}/{activity}/queue            join the waiting room's line (JWT)
//	GET  {prefix}/{activity}/queue            the caller's place in the line (JWT)
//
// Every refusal is a JSON body {"code", "message"} whose code is a stable machine word; the
// placeholder {http.seckill.code} carries it. Any client-supplied Seckill-* header is removed.
// With Forward, a winner's request goes on to the next handler with signed Seckill-* headers
// instead of being answered here.
type Handler struct {
	// Prefix is the path under which the API is mounted; default "/seckill". Use "/" when an
	// outer handle_path already stripped it.
	Prefix string `json:"prefix,omitempty"`

	// Forward passes a winner's buy request on to the next handler (e.g. reverse_proxy to the
	// shop's order API) with the Seckill-Reservation, -Activity, -User, -Qty and -Signature
	// headers, instead of answering 202 here. The app's forward_secret keys the signature.
	Forward bool `json:"forward,omitempty"`

	// Errors selects how refusals are answered: "write" writes the JSON body; "return" returns
	// them to Caddy as HTTP errors (for handle_errors); "auto", the default, returns them when the
	// server has handle_errors routes and writes them otherwise.
	Errors string `json:"errors,omitempty"`

	app        *App
	prefix     string
	logger     *zap.Logger
	now        func() time.Time
	noClientIP *sync.Once // the warning that the IP limit met a request without an address
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.seckill",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision sets up the handler with the seckill app.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	h.now = time.Now
	h.noClientIP = new(sync.Once)
	var err error
	if h.prefix, h.app, err = provisionMount(ctx, h.Prefix, "/seckill", h.Errors); err != nil {
		return err
	}
	if h.app.verifier == nil {
		return errors.New("the seckill app has no jwt configuration: add a jwt block to the seckill global option")
	}
	if h.Forward && len(h.app.forwardSecret) == 0 {
		return errors.New("forward needs the seckill app's forward_secret, which signs the forwarded headers")
	}
	return nil
}

// ServeHTTP answers one call of the public API.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if servedError(w, r) {
		return nil
	}
	if err := h.app.ready(r.Context()); err != nil {
		return h.fail(w, r, errBusy(time.Second)) // not started, or the client went away waiting
	}
	stripSeckillHeaders(r.Header)
	armBodyDeadline(w, r, h.app.bodyTimeout)
	repl, _ := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if repl == nil {
		repl = caddy.NewReplacer() // only outside a Caddy server, which never happens in practice
	}
	q := &request{h: h, w: w, r: r, repl: repl, now: h.now()}
	repl.Map(q.placeholder)
	defer func() { h.app.metrics.observeRequest(q.activityID(), q.call.kind, q.code) }()

	c, ok := parseCall(h.prefix, r.URL.Path)
	if !ok {
		return q.fail(errNotFound)
	}
	q.call = c // and {http.seckill.activity} with it
	if !c.kind.allows(r.Method) {
		w.Header().Set("Allow", c.kind.methods())
		return q.fail(refuseAt(layerRoute, http.StatusMethodNotAllowed, codeMethodNotAllowed,
			r.Method+" is not allowed here; use "+c.kind.methods()))
	}
	// A press on a sold-out activity, the bulk of a sale's traffic, is answered before the IP
	// limit: the flag is one atomic load and writes nothing, while the limit takes a lock and
	// keeps a bucket for every address a flood of presses brings. The flag is read first, so a
	// buy of an activity with stock pays that load only, and looks the activity up once, below.
	// A press the flag does not answer (a held win's key) keeps the activity found here for
	// below, but not on q, so that an IP limit's refusal is counted as every other one is,
	// without the activity's label.
	var act *activity
	if c.kind == callBuy && h.app.backend.guard.SoldOut(c.activity) {
		if q.act, _ = h.app.acts.lookup(c.activity); q.act != nil && q.open(true) == errSoldOut && q.flagAnswers() {
			return q.fail(errSoldOut)
		}
		act, q.act = q.act, nil
	}
	if e := q.limitIP(); e != nil {
		return q.fail(e)
	}
	if act == nil {
		var ok bool
		if act, ok = h.app.acts.get(r.Context(), c.activity); !ok {
			return q.fail(errNoActivity)
		}
	}
	q.act = act

	switch c.kind {
	case callStatus:
		return q.status()
	case callCaptcha:
		return q.captcha()
	case callImage:
		return q.captchaMedia(captchaPNG)
	case callAudio:
		return q.captchaMedia(captchaWAV)
	case callPath:
		return q.path()
	case callBuy:
		return q.buy(next)
	case callResult:
		return q.result()
	case callQueue:
		return q.queue()
	case callChallenge:
		return q.challenge()
	}
	return q.fail(errNotFound)
}

// request is one call in progress.
type request struct {
	h    *Handler
	w    http.ResponseWriter
	r    *http.Request
	repl *caddy.Replacer
	now  time.Time
	call call
	act  *activity // nil until the call's activity is known
	user string    // the authenticated user, once known
	code string    // the answer's word, for the metrics

	reservation string // a win's reservation id
	refusal     *Error // the refusal answered, for {http.seckill.message}
	hdrs        answerHeaders

	// The verified token's claims, for {http.seckill.claims.*}, set with user; claimMap decoded
	// from claims when a placeholder first asks, which most requests never do (once: a replacer
	// may be read by more than one goroutine, an access log's for one).
	claims    jwtauth.Claims
	claimOnce sync.Once
	claimMap  map[string]any
}

// activityID is the id of the call's activity, "" until it is known.
func (q *request) activityID() string {
	if q.act == nil {
		return ""
	}
	return q.act.ID
}

// fail answers a refusal and counts it at the funnel layer the refusal carries (Error.layer):
// the one place where the public API's refusals are counted. Its code and message are the
// request's placeholders (request.placeholder), not values set on the replacer.
func (q *request) fail(e *Error) error {
	q.code, q.refusal = e.Code, e
	q.h.app.metrics.observeRejection(e.layer)
	return answerRefusal(q.h.Errors, q.w, q.r, e, &q.hdrs)
}

// ok writes a successful JSON answer and sets {http.seckill.code} (request.placeholder).
func (q *request) ok(status int, code string, body any) error {
	q.code = code
	writeJSON(q.w, &q.hdrs, status, body)
	return nil
}

// headerPrefix starts every header this handler sets for the handlers after it.
const headerPrefix = "Seckill-"

// stripSeckillHeaders removes every Seckill-* request header: only this handler may set them, for
// the handlers after it.
func stripSeckillHeaders(h http.Header) {
	for name := range h {
		if len(name) >= len(headerPrefix) && strings.EqualFold(name[:len(headerPrefix)], headerPrefix) {
			delete(h, name)
		}
	}
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)

// servedError writes, inside handle_errors, the default JSON body of the error being handled and
// reports whether it did so; every handler of this plugin starts with it.
func servedError(w http.ResponseWriter, r *http.Request) bool {
	err, ok := r.Context().Value(caddyhttp.ErrorCtxKey).(error)
	if ok {
		serveError(w, err)
	}
	return ok
}

// provisionMount checks the options every handler of this plugin shares and returns the path
// prefix it serves (def when none is configured, without a trailing slash) and the seckill app.
func provisionMount(ctx caddy.Context, prefix, def, errorsMode string) (string, *App, error) {
	if err := validErrorsMode(errorsMode); err != nil {
		return "", nil, err
	}
	if prefix == "" {
		prefix = def
	} else if !strings.HasPrefix(prefix, "/") {
		return "", nil, fmt.Errorf("prefix %q must start with /", prefix)
	}
	v, err := ctx.App("seckill")
	if err != nil {
		return "", nil, fmt.Errorf("seckill app: %w", err)
	}
	return strings.TrimRight(prefix, "/"), v.(*App), nil
}
