package caddymodule

import (
	"errors"
	"net/http"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// Activity states of the status call.
const (
	stateUpcoming = "upcoming"
	stateOpen     = "open"
	stateSoldOut  = "sold_out"
	stateEnded    = "ended"
)

// statusAnswer is the body of GET {prefix}/{activity}. Pages count down from ServerTimeMS, not
// from the client's clock.
type statusAnswer struct {
	Code         string `json:"code"`
	Activity     string `json:"activity"`
	State        string `json:"state"`
	ServerTimeMS int64  `json:"server_time_ms"`
	StartMS      int64  `json:"start_ms"`
	EndMS        int64  `json:"end_ms"`
	RevealMS     int64  `json:"reveal_ms"` // the buy path is handed out from start_ms - reveal_ms
	Remaining    int64  `json:"remaining"`

	Title string       `json:"title,omitempty"` // the configured title; absent without one
	Price *priceAnswer `json:"price,omitempty"` // the configured price; absent without one

	// WaitingRoom is present only for an activity with a waiting room: the page then joins the
	// line before it asks for the buy path.
	WaitingRoom *roomAnswer `json:"waiting_room,omitempty"`
}

// roomAnswer is an activity's waiting room as the status call shows it.
type roomAnswer struct {
	OpensMS   int64 `json:"opens_ms"`   // when the line opens (Unix ms): start - opens
	SessionMS int64 `json:"session_ms"` // how long an admitted buyer may take to buy
	// ProofBits is the proof of work a join costs (proof_of_work), absent when none.
	ProofBits int `json:"proof_of_work,omitempty"`
}

// priceAnswer is an activity's price as the status call shows it: exact in minor units for
// programs, and written out for people.
type priceAnswer struct {
	Amount   int64  `json:"amount"`   // in the currency's minor units (cents for USD)
	Currency string `json:"currency"` // ISO 4217
	Display  string `json:"display"`  // "199.00 USD"
}

// status answers the public, cacheable state of an activity. It costs at most one store call per
// activity per second on this node, whatever the traffic.
func (q *request) status() error {
	a := q.act
	remaining, err := q.h.app.acts.remaining(q.r.Context(), a.ID)
	switch {
	case errors.Is(err, admission.ErrUnknownActivity):
		return q.fail(errNoActivity)
	case err != nil:
		return q.fail(errBusyAt(storeFailureLayer(err), time.Second))
	}
	state := stateOpen
	switch {
	case q.now.Before(a.Start):
		state = stateUpcoming
	case !q.now.Before(a.End):
		state = stateEnded
	case remaining <= 0 || q.h.app.backend.guard.SoldOut(a.ID):
		state = stateSoldOut
	}
	q.w.Header().Set("Cache-Control", "public, max-age=1")
	var price *priceAnswer
	if p := a.price; p != nil {
		price = &priceAnswer{Amount: p.Amount, Currency: p.Currency, Display: p.String()}
	}
	var room *roomAnswer
	if r := q.h.app.rooms[a.ID]; r != nil {
		room = &roomAnswer{OpensMS: r.Opens(a.Start).UnixMilli(), SessionMS: r.Config().Session.Milliseconds(),
			ProofBits: r.Config().ProofBits}
	}
	return q.ok(http.StatusOK, codeOK, statusAnswer{
		Code:         codeOK,
		Activity:     a.ID,
		State:        state,
		ServerTimeMS: q.now.UnixMilli(),
		StartMS:      a.Start.UnixMilli(),
		EndMS:        a.End.UnixMilli(),
		RevealMS:     a.reveal.Milliseconds(),
		Remaining:    max(remaining, 0),
		Title:        a.title,
		Price:        price,
		WaitingRoom:  room,
	})
}
