package caddymodule

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/internal/ticker"
	"github.com/caddy-seckill/caddy-seckill/money"
)

// How the node-local view of the activities follows the store. The handler needs an activity's
// window and salt on every request; reading them from the store each time would put a store call
// in front of every check the funnel wants to keep store-free (window, hashed URL).
const (
	refreshEvery   = 5 * time.Second // picks up activities changed through the admin API on any node
	missRefreshGap = time.Second     // an unknown id triggers at most one refresh per gap
	stockMaxAge    = time.Second     // the status call's remaining stock may be this old
)

// activity is what the handler knows of one activity.
type activity struct {
	admission.Activity
	shown
}

// shown is what the configuration says of an activity beyond its store definition; an activity
// defined only through the admin API has none of it.
type shown struct {
	reveal time.Duration // how long before Start the buy path is handed out
	price  *money.Price  // nil: sold without a price shown
	title  string
}

// activities is the node-local, periodically refreshed view of the activities in the store.
type activities struct {
	store admission.Store
	shown map[string]shown // from the configuration; read-only

	mu sync.RWMutex
	// byID holds each activity with what the configuration shows of it, never modified once in
	// (put and refresh install new ones): a request keeps a pointer rather than a copy.
	byID map[string]*activity
	// A refresh installs what it read from the store, which may be older than a put or forget
	// made while it ran (the app's start defining the activities, the admin API): each put and
	// forget is numbered, and a refresh keeps what those made after it began.
	changes uint64            // put and forget calls so far
	changed map[string]uint64 // id -> the number of its last put or forget, until a refresh has seen it

	refreshMu sync.Mutex // one refresh at a time
	refreshed time.Time  // guarded by refreshMu

	stockMu sync.Mutex
	stock   map[string]stockReading // only for ids in byID, so bounded by the activities
}

type stockReading struct {
	remaining int64
	at        time.Time
	reading   bool // a caller is reading a fresh value from the store

	soldOutAt  time.Time // when a reading first showed no stock left; zero while some is left
	wins, dead int64     // the store's queue counters at the last full read (refresh, admin API)
}

func newActivities(store admission.Store, shown map[string]shown) *activities {
	return &activities{
		store:   store,
		shown:   shown,
		byID:    map[string]*activity{},
		changed: map[string]uint64{},
		stock:   map[string]stockReading{},
	}
}

// get returns the activity id. An id this node does not know triggers a refresh from the store, at
// most once per missRefreshGap, so a flood of made-up ids costs at most one listing per second.
func (c *activities) get(ctx context.Context, id string) (*activity, bool) {
	if a, ok := c.lookup(id); ok {
		return a, true
	}
	c.refreshMu.Lock()
	stale := time.Since(c.refreshed) >= missRefreshGap
	c.refreshMu.Unlock()
	if stale {
		_ = c.refresh(ctx) // on failure the old view stays; the caller answers not_found
	}
	return c.lookup(id)
}

func (c *activities) lookup(id string) (*activity, bool) {
	c.mu.RLock()
	a, ok := c.byID[id]
	c.mu.RUnlock()
	return a, ok
}

// entry is a's entry of byID.
func (c *activities) entry(a admission.Activity) *activity {
	return &activity{Activity: a, shown: c.shown[a.ID]}
}

// put records one definition, as returned by the store.
func (c *activities) put(a admission.Activity) {
	c.mu.Lock()
	c.byID[a.ID] = c.entry(a)
	c.changes++
	c.changed[a.ID] = c.changes
	c.mu.Unlock()
}

// refresh replaces the view with the store's list of activities.
func (c *activities) refresh(ctx context.Context) error {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	if time.Since(c.refreshed) < missRefreshGap/10 {
		return nil // another caller just did it
	}
	c.mu.RLock()
	began := c.changes
	c.mu.RUnlock()
	ids, err := c.store.Activities(ctx)
	if err != nil {
		c.refreshed = time.Now() // a failing store is not retried by every request either
		return err
	}
	next := make(map[string]*activity, len(ids))
	now := time.Now()
	var errs []error
	for _, id := range ids {
		s, err := c.store.Activity(ctx, id)
		if errors.Is(err, admission.ErrUnknownActivity) {
			continue // deleted since the listing
		}
		if err != nil {
			errs = append(errs, err)
			if old, ok := c.lookup(id); ok {
				next[id] = old // keep what we knew
			}
			continue
		}
		next[id] = c.entry(s.Activity)
		c.setStock(id, s.Remaining, now)
		c.setQueues(id, s.Queued, s.Dead)
	}
	c.mu.Lock()
	for id, n := range c.changed {
		switch a, ok := c.byID[id]; {
		case n <= began:
			delete(c.changed, id) // this refresh read the store after it
		case ok:
			next[id] = a // defined while the store was read: newer than what was read
		default:
			delete(next, id) // deleted meanwhile
		}
	}
	c.byID = next
	c.mu.Unlock()
	c.stockMu.Lock()
	for id := range c.stock {
		if _, ok := next[id]; !ok {
			delete(c.stock, id)
		}
	}
	c.stockMu.Unlock()
	c.refreshed = time.Now()
	return errors.Join(errs...)
}

// refreshLoop refreshes the view every refreshEvery until ctx is done.
func (c *activities) refreshLoop(ctx context.Context, logger *zap.Logger) {
	ticker.Every(ctx, refreshEvery, func() {
		rctx, cancel := context.WithTimeout(ctx, refreshEvery)
		defer cancel()
		if err := c.refresh(rctx); err != nil && ctx.Err() == nil {
			logger.Warn("refreshing activities", zap.Error(err))
		}
	})
}

// setStock records a reading of the remaining stock of a known activity.
func (c *activities) setStock(id string, remaining int64, at time.Time) {
	c.stockMu.Lock()
	if old, ok := c.stock[id]; !ok || !old.at.After(at) {
		r := stockReading{remaining: remaining, at: at, wins: old.wins, dead: old.dead}
		switch {
		case remaining > 0:
		case ok && !old.soldOutAt.IsZero():
			r.soldOutAt = old.soldOutAt
		default:
			r.soldOutAt = at
		}
		c.stock[id] = r
	} else if old.reading {
		old.reading = false
		c.stock[id] = old
	}
	c.stockMu.Unlock()
}

// took counts a win of qty in a split activity on this node: its decision carries only the
// buyer's bucket's stock (floor, a lower bound of the activity's), so the node's last reading is
// lowered by qty, never below floor, and keeps its age (the status call reads the store again on
// time). It returns the new reading; ok is false before the first reading.
func (c *activities) took(id string, qty, floor int64) (n int64, ok bool) {
	c.stockMu.Lock()
	defer c.stockMu.Unlock()
	r, ok := c.stock[id]
	if !ok {
		return 0, false
	}
	r.remaining = max(r.remaining-qty, floor)
	c.stock[id] = r
	return r.remaining, true
}

// remaining returns the activity's remaining stock, read from the store at most once per
// stockMaxAge: the status call is public and cacheable, and must not become a store flood. While
// one caller reads a stale value from the store, the others answer with the stale value; when the
// store fails, the last reading is answered.
func (c *activities) remaining(ctx context.Context, id string) (int64, error) {
	now := time.Now()
	c.stockMu.Lock()
	r, ok := c.stock[id]
	if ok && (now.Sub(r.at) < stockMaxAge || r.reading) {
		c.stockMu.Unlock()
		return r.remaining, nil
	}
	if ok {
		r.reading = true
		c.stock[id] = r
	}
	c.stockMu.Unlock()
	n, err := c.store.Remaining(ctx, id)
	if err != nil {
		c.stockMu.Lock()
		r, ok := c.stock[id]
		if ok {
			r.reading = false
			c.stock[id] = r
		}
		c.stockMu.Unlock()
		if ok && !errors.Is(err, admission.ErrUnknownActivity) {
			return r.remaining, nil // a stale reading beats a 503 on the public status call
		}
		return 0, err
	}
	c.setStock(id, n, now)
	return n, nil
}

// setQueues records the store's wins and dead-letter counts of a known activity.
func (c *activities) setQueues(id string, wins, dead int64) {
	c.stockMu.Lock()
	if r, ok := c.stock[id]; ok {
		r.wins, r.dead = wins, dead
		c.stock[id] = r
	}
	c.stockMu.Unlock()
}

// activityView is what the node knows of one activity, for the metrics.
type activityView struct {
	id             string
	stock          int64
	start          time.Time
	remaining      int64
	soldOutAt      time.Time
	wins, deadWins int64
}

// views returns the node's view of every activity with a stock reading.
func (c *activities) views() []activityView {
	c.mu.RLock()
	defs := make(map[string]*activity, len(c.byID))
	for id, a := range c.byID {
		defs[id] = a
	}
	c.mu.RUnlock()
	c.stockMu.Lock()
	defer c.stockMu.Unlock()
	out := make([]activityView, 0, len(c.stock))
	for id, r := range c.stock {
		d, ok := defs[id]
		if !ok {
			continue
		}
		out = append(out, activityView{id: id, stock: d.Stock, start: d.Start, remaining: r.remaining,
			soldOutAt: r.soldOutAt, wins: r.wins, deadWins: r.dead})
	}
	return out
}

// pathsOut returns, sorted, the activities whose buy paths are handed out at now: from reveal
// before the start until the end.
func (c *activities) pathsOut(now time.Time) []string {
	c.mu.RLock()
	var out []string
	for id, a := range c.byID {
		if !now.Before(a.Start.Add(-a.reveal)) && now.Before(a.End) {
			out = append(out, id)
		}
	}
	c.mu.RUnlock()
	slices.Sort(out)
	return out
}

// forget drops an activity deleted through this node.
func (c *activities) forget(id string) {
	c.mu.Lock()
	delete(c.byID, id)
	c.changes++
	c.changed[id] = c.changes
	c.mu.Unlock()
	c.stockMu.Lock()
	delete(c.stock, id)
	c.stockMu.Unlock()
}
