package caddymodule

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	caddy.RegisterModule(OrdersHandler{})
}

// OrdersHandler serves the order API of the app's embedded order backend (the app's orders
// option) under Prefix:
//
//	GET  {prefix}/{order_id}          the order (owner only)
//	POST {prefix}/{order_id}/pay      200 paid, or 409 expired
//	POST {prefix}/{order_id}/cancel   200 cancelled, or 409 paid
//	POST {prefix}/webhooks/{provider} the payment provider's signed notifications (no token)
//
// Tokens are checked by the app's jwt configuration, like the seckill handler's. Another user's
// order is answered 404 not_found, exactly like a missing one. Refusals are JSON {"code",
// "message"} and follow Errors like the seckill handler's.
type OrdersHandler struct {
	// Prefix is the path under which the API is mounted; default "/orders". Use "/" when an outer
	// handle_path already stripped it.
	Prefix string `json:"prefix,omitempty"`

	// Errors selects how refusals are answered: "write", "return" or "auto" (the default), as for
	// the seckill handler.
	Errors string `json:"errors,omitempty"`

	app    *App
	prefix string
}

// CaddyModule returns the Caddy module information.
func (OrdersHandler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.seckill_orders",
		New: func() caddy.Module { return new(OrdersHandler) },
	}
}

// Provision sets up the handler with the seckill app's order backend.
func (h *OrdersHandler) Provision(ctx caddy.Context) error {
	var err error
	if h.prefix, h.app, err = provisionMount(ctx, h.Prefix, "/orders", h.Errors); err != nil {
		return err
	}
	if h.app.Orders == nil {
		return errors.New("seckill_orders serves the embedded order backend, and the seckill app has none: " +
			"add `orders sqlite <file>` or `orders postgres <dsn>` to the seckill global option " +
			"(or reverse_proxy to a standalone orderbackend)")
	}
	if h.app.verifier == nil {
		return errors.New("the seckill app has no jwt configuration: add a jwt block to the seckill global option")
	}
	return nil
}

// ServeHTTP answers one call of the order API. The backend's own API does the work; its refusals
// are turned into this package's errors, so that handle_errors and {http.seckill.code} work as
// for the seckill handler.
func (h *OrdersHandler) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	if servedError(w, r) {
		return nil
	}
	armBodyDeadline(w, r, h.app.bodyTimeout) // the API reads no body; net/http would wait for it
	tail, ok := strings.CutPrefix(r.URL.Path, h.prefix)
	if !ok || len(tail) < 2 || tail[0] != '/' {
		return answerError(h.Errors, w, r, apiError(http.StatusNotFound, codeNotFound, "no such order or call"))
	}
	if err := h.app.ready(r.Context()); err != nil {
		return answerError(h.Errors, w, r, errBusy(time.Second)) // not started
	}
	st := h.app.orders.state()
	if st == nil {
		return answerError(h.Errors, w, r, errBusy(time.Second)) // not started yet
	}
	// The backend's API lives at /orders/; it sees the request there, with this configuration's
	// token verifier.
	r2 := r.WithContext(withVerifier(r.Context(), h.app.verifier))
	u := *r.URL
	u.Path, u.RawPath = "/orders"+tail, ""
	r2.URL = &u
	rec := &capturedResponse{header: make(http.Header)}
	st.api.ServeHTTP(rec, r2)
	if rec.status == 0 {
		rec.status = http.StatusInternalServerError // the API always answers; never send a 0 status
	}

	if rec.status < http.StatusBadRequest {
		var ok struct {
			Code string `json:"code"`
		}
		_ = json.Unmarshal(rec.body.Bytes(), &ok)
		if repl, found := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); found {
			repl.Set(placeholderCode, ok.Code)
		}
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(rec.status)
		_, _ = w.Write(rec.body.Bytes())
		return nil
	}
	return answerError(h.Errors, w, r, refusal(rec, w.Header()))
}

// refusal turns the backend's error answer into an Error, carrying its Allow and Retry-After.
func refusal(rec *capturedResponse, out http.Header) *Error {
	e := &Error{Status: rec.status}
	if err := json.Unmarshal(rec.body.Bytes(), e); err != nil || e.Code == "" {
		e.Code, e.Message = codeForStatus(rec.status), http.StatusText(rec.status)
	}
	if allow := rec.header.Get("Allow"); allow != "" {
		out.Set("Allow", allow)
	}
	if s, err := strconv.Atoi(rec.header.Get("Retry-After")); err == nil && s > 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
}

// capturedResponse holds a response of the backend's API until ServeHTTP decides how to answer.
// The API's answers are small JSON documents.
type capturedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (c *capturedResponse) Header() http.Header { return c.header }

func (c *capturedResponse) WriteHeader(status int) {
	if c.status == 0 {
		c.status = status
	}
}

func (c *capturedResponse) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	return c.body.Write(b)
}

// Interface guards
var (
	_ caddy.Provisioner           = (*OrdersHandler)(nil)
	_ caddyhttp.MiddlewareHandler = (*OrdersHandler)(nil)
)
