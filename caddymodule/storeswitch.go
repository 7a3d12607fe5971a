package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// switchMargin is how close to its start an activity the running store holds is treated as on
// sale: the configuration in force keeps serving until a reload has started, and its connections
// until they drain, so an activity opening within this margin may take buys in the old store
// after the check.
const switchMargin = time.Minute

// inForce records the store of the configuration in force in this process, so that a reload to
// another store can check that it moves no sale (refuseStoreSwitch). It lives in the usage pool,
// shared by the configurations of the process, and is set by a Start that succeeded.
type inForce struct {
	mu  sync.Mutex
	cur storeInForce
	gen uint64 // the last generation handed out
}

// storeInForce is one configuration's entry in the inForce record.
type storeInForce struct {
	gen       uint64   // the setter's generation, for Stop to tell its own entry
	key       string   // the backend's pool key
	directive string   // the store's directive, for messages
	backend   *backend // nil before the first Start
}

// Destruct implements caddy.Destructor; the record holds no resources (the backend is the pool's).
func (*inForce) Destruct() error { return nil }

// inForcePoolKey is the pool key of the process's one inForce record.
const inForcePoolKey = "seckill.inforce"

// loadInForce returns the pooled record of the store in force. The caller must pool.Delete(key)
// once it no longer needs it.
func loadInForce() (*inForce, string, error) {
	v, _, err := pool.LoadOrNew(inForcePoolKey, func() (caddy.Destructor, error) { return new(inForce), nil })
	if err != nil {
		return nil, "", err
	}
	return v.(*inForce), inForcePoolKey, nil
}

// get returns the store in force: its pool key, directive and backend (nil before any Start).
func (r *inForce) get() (string, string, *backend) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur.key, r.cur.directive, r.cur.backend
}

// set records the store of a configuration whose Start succeeded. It returns the new entry's
// generation and the entry it replaced, for unset.
func (r *inForce) set(key, directive string, b *backend) (uint64, storeInForce) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gen++
	prev := r.cur
	r.cur = storeInForce{gen: r.gen, key: key, directive: directive, backend: b}
	return r.gen, prev
}

// unset puts prev back when the entry in force is still generation gen's: Caddy stopped that
// configuration without another one starting after it, as when it rolls back a reload whose
// other app failed to start after this one. The configuration before stays in force, in its
// store, and a later reload to gen's store must still be checked.
func (r *inForce) unset(gen uint64, prev storeInForce) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if gen != 0 && r.cur.gen == gen {
		r.cur = prev
	}
}

// refuseStoreSwitch refuses a reload whose store is not the store in force while an activity
// this configuration keeps is on sale there (its window opened, or opens within switchMargin, or
// it sold items): the new store would define it afresh, with its full stock, and sell the items
// again; its wins, results and releases would stay behind in the old store. A new store that
// holds the same sale (same start and salt: the same Redis under other client options, say) is
// no switch. The store in force is read through its guard, retried while its breaker is open; when
// it cannot be read, only a new store that already holds the activity, opened, is accepted.
func (a *App) refuseStoreSwitch(ctx context.Context, rec *inForce, key string) error {
	oldKey, oldDirective, old := rec.get()
	if old == nil || oldKey == key {
		return nil
	}
	for _, id := range slices.Sorted(maps.Keys(a.Activities)) {
		snap, err := readActivity(ctx, old.guard, id)
		if errors.Is(err, admission.ErrUnknownActivity) {
			continue
		}
		if err != nil {
			if held, herr := readActivity(ctx, a.backend.guard, id); herr == nil && !held.Start.After(time.Now()) {
				// A copy of the sale whose window has opened (a replica put in the place of a
				// dead Redis): the new store defines nothing afresh.
				a.logger.Warn("the store changes and the running store cannot be read; the new store holds the activity, opened",
					zap.String("activity", id), zap.String("from", oldDirective),
					zap.String("to", storeDirective(a.store)), zap.Error(err))
				continue
			}
			return fmt.Errorf("activity %s: the store changes from %s to %s, and the running store cannot "+
				"be read to check that the activity is not on sale there: %w; a reload never moves a sale to "+
				"another store: keep %s, or remove the activity from the configuration first",
				id, oldDirective, storeDirective(a.store), err, oldDirective)
		}
		if snap.Start.After(time.Now().Add(switchMargin)) && snap.Sold == 0 {
			continue // not on sale yet: the new store defines it before anyone buys
		}
		if now, err := readActivity(ctx, a.backend.guard, id); err == nil &&
			now.Start.Equal(snap.Start) && now.Salt == snap.Salt {
			continue // the new store holds the same sale
		}
		return fmt.Errorf("activity %s is on sale in %s (start %s, %d of %d sold), and this configuration "+
			"changes the store to %s, which would start it afresh with its full stock and sell those items "+
			"again: a reload never moves a sale to another store; keep %s until the sale is over, or remove "+
			"the activity from the configuration first (its wins stay in %s)",
			id, oldDirective, snap.Start.Format(time.RFC3339), snap.Sold, snap.Stock,
			storeDirective(a.store), oldDirective, oldDirective)
	}
	return nil
}

// readActivity reads an activity through g, waiting for the trial of an open breaker.
func readActivity(ctx context.Context, g *admission.Guard, id string) (admission.Snapshot, error) {
	return throughTrial(ctx, func() (admission.Snapshot, error) { return g.Activity(ctx, id) })
}
