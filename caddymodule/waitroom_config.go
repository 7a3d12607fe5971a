package caddymodule

import (
	"context"
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/waitroom"
)

// WaitingRoomConfig puts a waiting room in front of an activity's buy step (package waitroom):
// buyers join a line at {prefix}/{activity}/queue, those who joined before the start are shuffled
// by a lottery at the start, later ones line up behind them, and the buy path is handed only to a
// buyer whose turn has come, for Session. Store memory or redis (the line is shared by every
// gateway of a Redis sale).
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
// (waitroom.Line): store memory or redis; proof_of_work also a spent set (powSpender).
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
			return nil, nil, nil, fmt.Errorf("activity %s: waiting_room needs store memory or redis; %s keeps no line: "+
				"remove waiting_room or change the store", id, storeDirective(m))
		}
		if r.Config().ProofBits > 0 && spender == nil {
			return nil, nil, nil, fmt.Errorf("activity %s: waiting_room proof_of_work needs a store that keeps spent proofs; "+
				"%s keeps none: remove proof_of_work or change the store", id, storeDirective(m))
		}
		rooms[id] = r
	}
	return rooms, line, spender, nil
}
