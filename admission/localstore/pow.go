package localstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// proofSpent is the set of proof-of-work challenges already answered (package waitroom), each
// until its challenge expires. It is this process's own and is not journaled: a restart forgets
// it, which lets an answer whose challenge has not expired yet (at most waitroom.ProofTTL) be
// used once more on that node.
type proofSpent struct {
	mu    sync.Mutex
	until map[string]time.Time // activity "\x00" challenge id → when the entry may go
	sweep int                  // sweep the expired entries when the set grows past this
}

// maxProofID bounds a challenge id (waitroom's are 22 characters).
const maxProofID = 64

// SpendProof marks the proof-of-work challenge id of activity spent until until: true the first
// time, false when it was already spent. The set is per process and not durable.
func (s *Memory) SpendProof(ctx context.Context, activity, id string, until time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("spend proof %s: %w", activity, err)
	}
	if err := memCheckActivity(activity); err != nil {
		return false, fmt.Errorf("spend proof: %w", err)
	}
	if id == "" || len(id) > maxProofID {
		return false, fmt.Errorf("spend proof %s: %w", activity, admission.BadInput("challenge id of %d bytes", len(id)))
	}
	return s.spent.spend(activity+"\x00"+id, until, s.now()), nil
}

func (p *proofSpent) spend(key string, until, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.until == nil {
		p.until = make(map[string]time.Time)
	}
	if u, ok := p.until[key]; ok && now.Before(u) {
		return false
	}
	p.until[key] = until
	if len(p.until) > p.sweep {
		// Amortised: a sweep at most each time the set doubles since the last one.
		for k, u := range p.until {
			if !now.Before(u) {
				delete(p.until, k)
			}
		}
		p.sweep = max(2*len(p.until), 1024)
	}
	return true
}

// SpendProof implements the waiting room's spent set on the current opening's Memory: per
// process and not journaled, as Memory's.
func (s *Store) SpendProof(ctx context.Context, activity, id string, until time.Time) (bool, error) {
	return call(s, ctx, func(m *Memory) (bool, error) { return m.SpendProof(ctx, activity, id, until) },
		func(err error) error { return fmt.Errorf("spend proof %s: %w", activity, err) })
}
