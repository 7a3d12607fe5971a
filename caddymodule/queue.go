package caddymodule

import (
	"context"
	"errors"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/waitroom"
)

// queueAnswer is the answer of the queue call: the caller's place in the waiting room's line.
type queueAnswer struct {
	Code      string `json:"code"`
	State     string `json:"state"`
	Position  int64  `json:"position"`
	Ahead     int64  `json:"ahead"`
	ETAMS     int64  `json:"eta_ms"`
	RefreshMS int64  `json:"refresh_ms"`
	// AdmittedUntilMS is the end of the caller's session (Unix ms), once admitted.
	AdmittedUntilMS int64 `json:"admitted_until_ms,omitempty"`
}

// lineTimeout bounds one line call: the line is read from the store on every poll, and a stalled
// Redis must cost a poll about a second (then 503 busy), as it costs a buy.
const lineTimeout = admitTimeout

// challengeAnswer is the answer of the challenge call: a proof of work to solve before joining.
type challengeAnswer struct {
	Code      string `json:"code"`
	Challenge string `json:"challenge"`
	Bits      int    `json:"bits"`
	ExpiresMS int64  `json:"expires_ms"`
}

// joinBody is the join's body when the room asks a proof of work.
type joinBody struct {
	Challenge string `json:"challenge"`
	Answer    string `json:"answer"`
}

// The proof-of-work codes of the public contract (docs/api.md).
const (
	codePowRequired = "pow_required"
	codePowInvalid  = "pow_invalid"
	codePowExpired  = "pow_expired"
	codePowSpent    = "pow_spent"
)

var (
	errNoPow       = sharedError(layerRoute, http.StatusNotFound, codeNotFound, "this waiting room asks no proof of work")
	errPowRequired = sharedError(layerWaitingRoom, http.StatusForbidden, codePowRequired,
		"joining costs a proof of work: GET .../queue/challenge, then POST {challenge, answer}")
	errPowSpent = sharedError(layerWaitingRoom, http.StatusConflict, codePowSpent,
		"this challenge was answered already: GET .../queue/challenge for a new one")
	errNoRoom      = sharedError(layerRoute, http.StatusNotFound, codeNotFound, "this activity has no waiting room")
	errNotInLine   = sharedError(layerWaitingRoom, http.StatusNotFound, codeNotInLine, "you are not in the line: join it with POST")
	errNotJoined   = sharedError(layerWaitingRoom, http.StatusForbidden, codeNotAdmitted, "join the waiting room first (POST .../queue)")
	errNotYourTurn = sharedError(layerWaitingRoom, http.StatusForbidden, codeNotAdmitted, "your turn has not come yet: wait in the line")
	errTurnOver    = sharedError(layerWaitingRoom, http.StatusForbidden, codeNotAdmitted, "your turn in the waiting room is over")
)

// queue joins the waiting room's line (POST) or reads the caller's place in it (GET, HEAD).
func (q *request) queue() error {
	room := q.h.app.rooms[q.act.ID]
	if room == nil {
		return q.fail(errNoRoom)
	}
	if e := q.authenticate(); e != nil {
		return q.fail(e)
	}
	if e := q.limitUser(userBucketResult); e != nil {
		return q.fail(e)
	}
	ctx, cancel := context.WithTimeout(q.r.Context(), lineTimeout)
	defer cancel()
	var p waitroom.Place
	var err error
	if q.r.Method == http.MethodPost {
		e := q.joinable(room)
		if e == nil {
			e = q.proofOfWork(ctx, room)
		}
		if e != nil {
			q.h.app.roomMetrics.join(q.act.ID, e.Code)
			return q.fail(e)
		}
		p, err = q.h.app.line.Join(ctx, q.act.ID, q.user, room.Terms(q.act.ID, q.user, q.act.Salt))
	} else {
		p, err = q.h.app.line.Place(ctx, q.act.ID, q.user)
	}
	if err != nil {
		e := q.lineError(err)
		if q.r.Method == http.MethodPost {
			q.h.app.roomMetrics.join(q.act.ID, e.Code)
		}
		return q.fail(e)
	}
	if q.r.Method == http.MethodPost {
		q.h.app.roomMetrics.joined(q.act.ID, p.Joined)
	}
	s := room.Status(p, q.act.Start, q.closed(ctx, p.Now))
	ans := queueAnswer{Code: codeOK, State: string(s.State), Position: s.Position, Ahead: s.Ahead,
		ETAMS: s.ETA.Milliseconds(), RefreshMS: s.Refresh.Milliseconds()}
	if !s.Until.IsZero() {
		ans.AdmittedUntilMS = s.Until.UnixMilli()
	}
	return q.ok(http.StatusOK, codeOK, ans)
}

// challenge hands out a proof-of-work challenge for the caller to join the activity's line: signed,
// bound to the activity and the caller, and stateless (nothing is stored until it is answered).
func (q *request) challenge() error {
	room := q.h.app.rooms[q.act.ID]
	if room == nil {
		return q.fail(errNoRoom)
	}
	bits := room.Config().ProofBits
	if bits == 0 {
		return q.fail(errNoPow)
	}
	if e := q.authenticate(); e != nil {
		return q.fail(e)
	}
	if e := q.limitUser(userBucketResult); e != nil {
		return q.fail(e)
	}
	c, err := waitroom.NewChallenge(waitroom.ProofKey(q.act.Salt), q.act.ID, q.user, bits, q.now)
	if err != nil {
		q.h.logger.Error("proof of work challenge", zap.String("activity", q.act.ID), zap.Error(err))
		return q.fail(errBusyAt(layerWaitingRoom, time.Second))
	}
	q.w.Header().Set("Cache-Control", "no-store")
	return q.ok(http.StatusOK, codeOK, challengeAnswer{Code: codeOK, Challenge: c.Token, Bits: c.Bits,
		ExpiresMS: c.Expires.UnixMilli()})
}

// proofOfWork checks the join's proof of work, when the room asks one, and spends it: an answer
// joins once. A refused proof changes nothing but the spent set.
func (q *request) proofOfWork(ctx context.Context, room *waitroom.Room) *Error {
	bits := room.Config().ProofBits
	if bits == 0 {
		return nil
	}
	b, e := q.readBody()
	if e != nil {
		return e
	}
	var body joinBody
	if len(b) > 0 {
		if err := decodeJSON(b, &body); err != nil {
			return errBadRequest(err.Error())
		}
	}
	if body.Challenge == "" && body.Answer == "" {
		return errPowRequired
	}
	t, err := waitroom.CheckProof(waitroom.ProofKey(q.act.Salt), q.act.ID, q.user, bits, body.Challenge, body.Answer, q.now)
	switch {
	case errors.Is(err, waitroom.ErrProofExpired):
		return refuseAt(layerWaitingRoom, http.StatusForbidden, codePowExpired, err.Error())
	case err != nil:
		return refuseAt(layerWaitingRoom, http.StatusForbidden, codePowInvalid, err.Error())
	}
	fresh, err := q.h.app.spender.SpendProof(ctx, q.act.ID, t.ID, t.Expires)
	switch {
	case err != nil:
		return q.lineError(err)
	case !fresh:
		return errPowSpent
	}
	return nil
}

// joinable refuses a join outside the line's hours: before it opens, after the end, or once
// the activity is sold out. Such a join changes nothing.
func (q *request) joinable(room *waitroom.Room) *Error {
	a := q.act
	if opens := room.Opens(a.Start); q.now.Before(opens) {
		return refuseAt(layerWindow, http.StatusForbidden, codeNotStarted,
			"the waiting room opens at "+opens.UTC().Format(time.RFC3339))
	}
	return q.open(false)
}

// closed reports whether nobody is let through any more at now: the activity has ended, or its
// stock is gone (this node's flag, or the store's count read at most once a second, so every
// gateway tells its waiting buyers at once).
func (q *request) closed(ctx context.Context, now time.Time) bool {
	if !now.Before(q.act.End) || q.h.app.backend.guard.SoldOut(q.act.ID) {
		return true
	}
	n, err := q.h.app.acts.remaining(ctx, q.act.ID)
	return err == nil && n <= 0
}

// lineError maps a failed line call to the caller's answer.
func (q *request) lineError(err error) *Error {
	switch {
	case errors.Is(err, waitroom.ErrNotInLine):
		return errNotInLine
	case errors.Is(err, admission.ErrUnknownActivity):
		return errNoActivity
	}
	q.h.logger.Warn("waiting room line call failed", zap.String("activity", q.act.ID), zap.Error(err))
	return errBusyAt(storeFailureLayer(err), time.Second)
}

// admitted lets through the buy step (the path and the buy calls) a caller whose turn in the
// activity's waiting room has come and whose session lasts; an activity without a room lets
// everyone through. It costs one line read.
func (q *request) admitted() *Error {
	room := q.h.app.rooms[q.act.ID]
	if room == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(q.r.Context(), lineTimeout)
	defer cancel()
	p, err := q.h.app.line.Place(ctx, q.act.ID, q.user)
	if errors.Is(err, waitroom.ErrNotInLine) {
		return errNotJoined
	}
	if err != nil {
		return q.lineError(err)
	}
	switch room.Status(p, q.act.Start, false).State {
	case waitroom.Admitted:
		return nil
	case waitroom.Expired:
		return errTurnOver
	}
	return errNotYourTurn
}
