package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/waitroom"
)

// WaitingRoomConfig puts a waiting room in front of an activity's buy step (package waitroom):
// buyers join a line at {prefix}/{activity}/queue, those who joined before the start are shuffled
// by a lottery at the start, later ones line up behind them, and the buy path is handed only to a
// buyer whose turn has come, for Session. The store keeps the line (LineKeeper): memory (lost
// with the process), local (on disk: a restart keeps every place) or redis (shared by every
// gateway of the sale).
type WaitingRoomConfig struct {
	// Opens is how long before the start the line opens; default 15m.
	Opens caddy.Duration `json:"opens,omitempty"`

	// Admit is how many buyers are let through per period, across every gateway, "<n>/<period>"
	// such as "200/s"; default 200/s.
	Admit string `json:"admit,omitempty"`

	// Session is how long an admitted buyer may take to fetch the buy path and buy; default 2m.
	Session caddy.Duration `json:"session,omitempty"`

	// ProofOfWork makes a join cost a proof of work of that many leading zero bits of SHA-256
	// (1 to 28; 2^bits hashes on average): GET {prefix}/{activity}/queue/challenge hands out a
	// signed challenge, the join's body carries its answer. 0 (the default) asks none.
	ProofOfWork int `json:"proof_of_work,omitempty"`

	at caddyfile.Token // the waiting_room line of a Caddyfile, for errors found once it is read
}

// noLine is the refusal of a waiting room in a store that keeps no line.
func (c *WaitingRoomConfig) noLine(id string, m StoreModule) error {
	return fmt.Errorf("activity %s: waiting_room needs a store that keeps a line (store memory, local or redis); "+
		"%s keeps none: remove waiting_room or change the store", id, storeDirective(m))
}

// powSpender is the spent set of proofs of work a store keeps for proof_of_work (redisstore in
// the activity's hash tag; localstore per process): SpendProof reports true the first time a
// challenge id is spent, false after.
type powSpender interface {
	SpendProof(ctx context.Context, activity, id string, until time.Time) (bool, error)
}

// room validates the settings and returns the room they describe.
func (c *WaitingRoomConfig) room() (*waitroom.Room, error) {
	cfg := waitroom.Config{Opens: time.Duration(c.Opens), Session: time.Duration(c.Session), ProofBits: c.ProofOfWork}
	if c.Opens < 0 {
		return nil, fmt.Errorf("opens %s is negative", time.Duration(c.Opens))
	}
	if c.Session < 0 {
		return nil, fmt.Errorf("session %s is negative", time.Duration(c.Session))
	}
	if c.Admit != "" {
		r, err := waitroom.ParseAdmit(c.Admit)
		if err != nil {
			return nil, err
		}
		cfg.Admit = r
	}
	return waitroom.New(cfg)
}

// provisionRooms returns the waiting rooms of the configured activities, by id, the store's line
// and its spent set of proofs of work. A waiting room needs a store that keeps a line
// (waitroom.Line); Provision checked that the module says it does (LineKeeper), and this checks the
// store it opened. proof_of_work also needs a spent set (powSpender).
func provisionRooms(acts map[string]*ActivityConfig, st admission.Store, m StoreModule) (map[string]*waitroom.Room, waitroom.Line, powSpender, error) {
	rooms := map[string]*waitroom.Room{}
	line, _ := st.(waitroom.Line)
	spender, _ := st.(powSpender)
	for id, c := range acts {
		if c.WaitingRoom == nil {
			continue
		}
		r, err := c.WaitingRoom.room()
		if err != nil {
			return nil, nil, nil, fmt.Errorf("activity %s: waiting_room: %w", id, err)
		}
		if line == nil {
			return nil, nil, nil, c.WaitingRoom.noLine(id, m)
		}
		if r.Config().ProofBits > 0 && spender == nil {
			return nil, nil, nil, fmt.Errorf("activity %s: waiting_room proof_of_work needs a store that keeps spent proofs; "+
				"%s keeps none: remove proof_of_work or change the store", id, storeDirective(m))
		}
		rooms[id] = r
	}
	return rooms, line, spender, nil
}

// refuseRoomChanges refuses, before anything is defined, a configuration whose waiting room has
// other terms (admit, session) than its line keeps: the first join fixes them, so that no turn
// moves and every gateway, whatever its configuration, admits the same buyers at the same time.
// Such a configuration would not be in force for that room; the operator learns it at the
// reload, not from the sale. A line nobody joined (or an activity the store does not have yet)
// takes the configuration's terms at its first join.
func (a *App) refuseRoomChanges(ctx context.Context) error {
	ids := slices.Sorted(maps.Keys(a.rooms))
	for _, id := range ids {
		room := a.rooms[id]
		t, err := a.line.Tally(ctx, id)
		switch {
		case errors.Is(err, admission.ErrUnknownActivity):
			continue
		case err != nil:
			return fmt.Errorf("activity %s: waiting_room: read its line: %w", id, err)
		case room.SameTerms(t.IntervalMS, t.SessionMS):
			continue
		}
		return fmt.Errorf("activity %s: waiting_room admit %s, session %s: its line, %d buyers in it, keeps admit %s, session %s "+
			"from its first join, and a reload never moves a turn: restore those in the configuration; other terms take "+
			"a line nobody joined (a new activity id, or after DELETE /seckill/activities/%s?force=1 on the admin API, "+
			"which ends this sale and its line)", id, waitroom.FormatInterval(room.IntervalMS()), room.Config().Session,
			t.Length, waitroom.FormatInterval(t.IntervalMS), time.Duration(t.SessionMS)*time.Millisecond, id)
	}
	return nil
}
