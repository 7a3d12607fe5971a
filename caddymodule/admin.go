package caddymodule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

func init() {
	caddy.RegisterModule(adminAPI{})
}

// adminAPI is the admin API module "admin.api.seckill": it manages the activities of the running
// seckill app on Caddy's admin endpoint.
//
//	GET    /seckill/activities                 every activity, with live counters
//	GET    /seckill/activities/{id}            one activity
//	PUT    /seckill/activities/{id}[?force=1]  create or redefine (force: even while running)
//	DELETE /seckill/activities/{id}[?force=1]  delete (force: even while running)
//	POST   /seckill/activities/{id}/release    give a reservation back: {"reservation_id": "..."}
//	                                           (409 while an embedded order holds it, or will)
//	POST   /seckill/activities/{id}/archive[?batch=n]
//	                                           move a finished, reconciled sale's orders to the
//	                                           archive tables (embedded order backend only)
//	GET    /seckill/stats                      breaker state and every activity's counters
//	GET    /seckill/reconcile[?activity={id}]  the invariants across store and order database
//	                                           (embedded order backend only)
//
// Activity salts are secrets and are never returned.
type adminAPI struct{}

// CaddyModule returns the Caddy module information.
func (adminAPI) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "admin.api.seckill",
		New: func() caddy.Module { return new(adminAPI) },
	}
}

// Routes returns the admin routes.
func (a adminAPI) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{{Pattern: "/seckill/", Handler: caddy.AdminHandlerFunc(a.serve)}}
}

// AdminActivity is an activity as the admin API shows it (GET /seckill/stats and
// /seckill/activities/{id}), exported for the watch command (package seckillcmd), which reads it.
type AdminActivity struct {
	ID        string    `json:"id"`
	Stock     int64     `json:"stock"`
	Limit     int64     `json:"limit"`
	Start     time.Time `json:"start"`
	End       time.Time `json:"end"`
	PayWithin string    `json:"pay_within"`
	Buckets   int       `json:"buckets,omitempty"` // the stock's split (store redis); the counters are the sums
	Remaining int64     `json:"remaining"`
	Sold      int64     `json:"sold"`
	Buyers    int64     `json:"buyers"`
	Wins      int64     `json:"wins"` // wins ever admitted (the wins queue's length)
	Dead      int64     `json:"dead"`
	SoldOut   bool      `json:"sold_out_flag"` // this node's sold-out flag
}

// adminDefinition is the body of PUT /seckill/activities/{id}.
type adminDefinition struct {
	Stock     int64          `json:"stock"`
	Limit     int64          `json:"limit,omitempty"`
	Start     time.Time      `json:"start"`
	End       time.Time      `json:"end"`
	PayWithin caddy.Duration `json:"pay_within,omitempty"`
	Buckets   int            `json:"buckets,omitempty"`
}

const adminMaxBody = 64 << 10

func (a adminAPI) serve(w http.ResponseWriter, r *http.Request) error {
	v, err := caddy.ActiveContext().AppIfConfigured("seckill")
	if err != nil {
		return apiErr(http.StatusNotFound, fmt.Errorf("the seckill app is not configured: %w", err))
	}
	app, ok := v.(*App)
	if !ok || !app.isOpen() {
		return apiErr(http.StatusServiceUnavailable, errors.New("the seckill app is not running"))
	}
	rest := strings.TrimPrefix(r.URL.Path, "/seckill/")
	seg := strings.Split(rest, "/")
	switch {
	case rest == "stats":
		if err := allow(r, http.MethodGet); err != nil {
			return err
		}
		return a.stats(w, r, app)
	case rest == "reconcile":
		if err := allow(r, http.MethodGet); err != nil {
			return err
		}
		return a.reconcile(w, r, app)
	case rest == "activities":
		if err := allow(r, http.MethodGet); err != nil {
			return err
		}
		return a.list(w, r, app)
	case len(seg) == 2 && seg[0] == "activities" && admission.ValidActivityID(seg[1]):
		switch r.Method {
		case http.MethodGet:
			return a.get(w, r, app, seg[1])
		case http.MethodPut:
			return a.define(w, r, app, seg[1])
		case http.MethodDelete:
			return a.delete(w, r, app, seg[1])
		}
		return allow(r, http.MethodGet, http.MethodPut, http.MethodDelete)
	case len(seg) == 3 && seg[0] == "activities" && admission.ValidActivityID(seg[1]) && seg[2] == "release":
		if err := allow(r, http.MethodPost); err != nil {
			return err
		}
		return a.release(w, r, app, seg[1])
	case len(seg) == 3 && seg[0] == "activities" && admission.ValidActivityID(seg[1]) && seg[2] == "archive":
		if err := allow(r, http.MethodPost); err != nil {
			return err
		}
		return a.archive(w, r, app, seg[1])
	}
	return apiErr(http.StatusNotFound, fmt.Errorf("no admin route %s", r.URL.Path))
}

func (adminAPI) list(w http.ResponseWriter, r *http.Request, app *App) error {
	acts, err := snapshots(r.Context(), app)
	if err != nil {
		return storeErr(err)
	}
	return writeAdmin(w, http.StatusOK, acts)
}

func (adminAPI) get(w http.ResponseWriter, r *http.Request, app *App, id string) error {
	s, err := app.backend.guard.Activity(r.Context(), id)
	if err != nil {
		return storeErr(err)
	}
	return writeAdmin(w, http.StatusOK, showActivity(app, s))
}

func (adminAPI) define(w http.ResponseWriter, r *http.Request, app *App, id string) error {
	var d adminDefinition
	body, err := io.ReadAll(io.LimitReader(r.Body, adminMaxBody+1))
	if err != nil {
		return apiErr(http.StatusBadRequest, fmt.Errorf("read body: %w", err))
	}
	if len(body) > adminMaxBody {
		return apiErr(http.StatusRequestEntityTooLarge, errors.New("body too large"))
	}
	if err := decodeStrictJSON(body, &d); err != nil {
		return apiErr(http.StatusBadRequest, err)
	}
	c := &ActivityConfig{Stock: d.Stock, Limit: d.Limit, Start: d.Start, End: d.End, PayWithin: d.PayWithin, Buckets: d.Buckets}
	if err := c.validate(id); err != nil {
		return apiErr(http.StatusBadRequest, err)
	}
	if err := c.validateStore(id, app.store); err != nil {
		return apiErr(http.StatusBadRequest, err)
	}
	if err := app.orders.refuseEarlierSale(r.Context(), app.backend.guard, id); err != nil {
		if errors.Is(err, errForgottenSale) {
			return apiErr(http.StatusConflict, err)
		}
		return storeErr(err)
	}
	force := forced(r)
	def, err := app.backend.guard.Define(r.Context(), c.definition(id), force)
	if err != nil {
		return storeErr(err)
	}
	app.acts.put(def)
	app.logger.Info("activity defined through the admin API", zap.String("activity", id),
		zap.Bool("force", force), zap.Int64("stock", def.Stock))
	// The consumer creates the database stock row when it discovers the activity and follows
	// redefinitions at its next claim round; doing it now keeps reconcile right in between.
	if err := app.orders.syncStock(r.Context(), []admission.Activity{def}); err != nil {
		app.logger.Warn("the order database's stock row will follow when the consumer starts",
			zap.String("activity", id), zap.Error(err))
	}
	s, err := app.backend.guard.Activity(r.Context(), id)
	if err != nil {
		return storeErr(err)
	}
	return writeAdmin(w, http.StatusOK, showActivity(app, s))
}

func (adminAPI) delete(w http.ResponseWriter, r *http.Request, app *App, id string) error {
	if err := app.backend.guard.Delete(r.Context(), id, forced(r)); err != nil {
		return storeErr(err)
	}
	app.acts.forget(id) // now, rather than at the next refresh
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (adminAPI) release(w http.ResponseWriter, r *http.Request, app *App, id string) error {
	var body struct {
		ReservationID string `json:"reservation_id"`
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, adminMaxBody))
	if err != nil {
		return apiErr(http.StatusBadRequest, fmt.Errorf("read body: %w", err))
	}
	if err := decodeStrictJSON(b, &body); err != nil || body.ReservationID == "" {
		return apiErr(http.StatusBadRequest, errors.New(`body must be {"reservation_id": "..."}`))
	}
	// Releasing the item of a pending or paid order puts it back on sale while its buyer may
	// still pay for it or owns it: it would be sold twice. A pending order is given up by
	// cancelling it (the relay then releases), as the payment timeout does.
	ord, held, err := app.orders.holdingOrder(r.Context(), id, body.ReservationID)
	switch {
	case errors.Is(err, errOrdersNotStarted), errors.Is(err, orderbackend.ErrUnavailable):
		return apiErr(http.StatusServiceUnavailable, err)
	case err != nil:
		return apiErr(http.StatusInternalServerError, err)
	case held:
		return writeAdmin(w, http.StatusConflict, adminRefusal{
			Error: fmt.Sprintf("reservation %s is held by order %s (%s): releasing it would sell its item twice; "+
				"a pending order gives it back when cancelled or unpaid in time", body.ReservationID, ord.ID, ord.Status),
			Code:    codeOrderHolds,
			OrderID: ord.ID, OrderStatus: string(ord.Status),
		})
	case app.orders != nil && ord.ID == "":
		// No order yet: unless the win was dead-lettered (which never becomes an order), the
		// consumer will still make it a pending order, whose item would then be on sale again.
		dead, err := isDeadLetter(r.Context(), app.backend.guard, id, body.ReservationID)
		if err != nil {
			return storeErr(err)
		}
		if !dead {
			return writeAdmin(w, http.StatusConflict, adminRefusal{
				Error: fmt.Sprintf("reservation %s has no order and no dead letter: a win in flight becomes an order, "+
					"and releasing it would sell its item twice (or it is no win of activity %s)", body.ReservationID, id),
				Code: codeWinInFlight,
			})
		}
	}
	released, err := app.backend.guard.Release(r.Context(), id, body.ReservationID)
	if err != nil {
		return storeErr(err)
	}
	return writeAdmin(w, http.StatusOK, map[string]bool{"released": released})
}

// codeOrderHolds is the code of a release refused because an order holds the reservation.
const codeOrderHolds = "order_holds_reservation"

// codeWinInFlight is the code of a release refused because the reservation is neither an order
// nor a dead letter of the embedded backend yet.
const codeWinInFlight = "win_in_flight"

// isDeadLetter reports whether reservation resv of activity is in the activity's dead-letter queue.
func isDeadLetter(ctx context.Context, g *admission.Guard, activity, resv string) (bool, error) {
	dead, err := g.DeadLetters(ctx, activity, orderbackend.MaxDeadLetters)
	if err != nil {
		return false, fmt.Errorf("dead letters of %s: %w", activity, err)
	}
	return slices.ContainsFunc(dead, func(w admission.Win) bool { return w.ReservationID == resv }), nil
}

// adminRefusal is a refusal a script branches on: Caddy's {"error": message} with a stable code
// and what it is about.
type adminRefusal struct {
	Error       string `json:"error"`
	Code        string `json:"code"`
	OrderID     string `json:"order_id,omitempty"`
	OrderStatus string `json:"order_status,omitempty"`
}

func (adminAPI) stats(w http.ResponseWriter, r *http.Request, app *App) error {
	acts, err := snapshots(r.Context(), app)
	if err != nil {
		return storeErr(err)
	}
	return writeAdmin(w, http.StatusOK, map[string]any{
		"store":      storeName(app.store),
		"breaker":    app.backend.guard.BreakerState().String(),
		"activities": acts,
	})
}

func (adminAPI) reconcile(w http.ResponseWriter, r *http.Request, app *App) error {
	if app.orders == nil {
		return apiErr(http.StatusConflict, errors.New("the seckill app has no orders configured: nothing to reconcile in this process"))
	}
	st := app.orders.state()
	if st == nil {
		return apiErr(http.StatusServiceUnavailable, errors.New("the order backend has not started"))
	}
	id := r.URL.Query().Get("activity")
	if id != "" && !admission.ValidActivityID(id) {
		return apiErr(http.StatusBadRequest, fmt.Errorf("activity id %q is not valid", id))
	}
	ans, err := reconcile(r.Context(), app.backend.guard, st.repo, id)
	app.metrics.observeReconcile(ans, err)
	if err != nil {
		return storeErr(err)
	}
	return writeAdmin(w, http.StatusOK, ans)
}

// archive is the archive command's call when the store can be read only through this process
// (store memory, or a store local folder it holds).
func (adminAPI) archive(w http.ResponseWriter, r *http.Request, app *App, id string) error {
	batch := orderbackend.DefaultArchiveBatch
	if b := r.URL.Query().Get("batch"); b != "" {
		n, err := strconv.Atoi(b)
		if err != nil || n < 1 {
			return apiErr(http.StatusBadRequest, fmt.Errorf("batch %q: want a number of orders of at least 1", b))
		}
		batch = n
	}
	if app.orders == nil {
		return apiErr(http.StatusConflict, errors.New("the seckill app has no orders configured: nothing to archive in this process"))
	}
	st := app.orders.state()
	if st == nil {
		return apiErr(http.StatusServiceUnavailable, errors.New("the order backend has not started"))
	}
	// Not the request's context: Caddy's admin server cancels it once its read timeout (10s) has
	// passed, and a big sale takes longer. An archive that ends early is resumed by the next one.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), time.Hour)
	defer cancel()
	rep, err := archive(ctx, app.backend.guard, st.repo, id, batch)
	switch {
	case errors.Is(err, ErrReconcileFails), errors.Is(err, orderbackend.ErrNotFinished):
		return apiErr(http.StatusConflict, err)
	case err != nil:
		return storeErr(err)
	}
	return writeAdmin(w, http.StatusOK, rep)
}

// snapshots reads every activity from the store, sorted by id.
func snapshots(ctx context.Context, app *App) ([]AdminActivity, error) {
	ids, err := app.backend.guard.Activities(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]AdminActivity, 0, len(ids))
	for _, id := range ids {
		s, err := app.backend.guard.Activity(ctx, id)
		if errors.Is(err, admission.ErrUnknownActivity) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, showActivity(app, s))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func showActivity(app *App, s admission.Snapshot) AdminActivity {
	app.acts.setStock(s.ID, s.Remaining, time.Now())
	app.acts.setQueues(s.ID, s.Queued, s.Dead)
	return AdminActivity{
		ID: s.ID, Stock: s.Stock, Limit: s.Limit, Start: s.Start, End: s.End,
		PayWithin: s.PayWithin.String(), Buckets: s.Buckets, Remaining: s.Remaining, Sold: s.Sold, Buyers: s.Buyers,
		Wins: s.Queued, Dead: s.Dead, SoldOut: app.backend.guard.SoldOut(s.ID),
	}
}

func forced(r *http.Request) bool {
	f, _ := strconv.ParseBool(r.URL.Query().Get("force"))
	return f
}

func allow(r *http.Request, methods ...string) error {
	for _, m := range methods {
		if r.Method == m {
			return nil
		}
	}
	return apiErr(http.StatusMethodNotAllowed, fmt.Errorf("method %s not allowed; use %s", r.Method, strings.Join(methods, ", ")))
}

func apiErr(status int, err error) error {
	return caddy.APIError{HTTPStatus: status, Err: err}
}

// storeErr maps a store error to the admin API's status.
func storeErr(err error) error {
	switch {
	case errors.Is(err, admission.ErrBadInput):
		return apiErr(http.StatusBadRequest, err)
	case errors.Is(err, admission.ErrUnknownActivity), errors.Is(err, admission.ErrNotFound):
		return apiErr(http.StatusNotFound, err)
	case errors.Is(err, admission.ErrActivityRunning):
		return apiErr(http.StatusConflict, fmt.Errorf("%w: add ?force=1 to change or delete a running sale", err))
	case errors.Is(err, admission.ErrStockBelowSold):
		return apiErr(http.StatusConflict, err)
	case errors.Is(err, admission.ErrBusy):
		return apiErr(http.StatusServiceUnavailable, err)
	}
	return apiErr(http.StatusInternalServerError, err)
}

func writeAdmin(w http.ResponseWriter, status int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	return json.NewEncoder(w).Encode(v)
}

// Interface guards
var _ caddy.AdminRouter = (*adminAPI)(nil)
