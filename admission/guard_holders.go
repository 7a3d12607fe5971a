package admission

import (
	"context"
	"time"
)

// holdersLoadTimeout bounds the background load of a sold-out activity's holders: it runs outside
// any request, so nothing else would.
const holdersLoadTimeout = 5 * time.Second

// guardHolders is the immutable set of users holding items in an activity, read when its flag was
// set. gen is the flag state it was read under; it answers only while the flag still has that
// state, so a set that a restock made stale is never consulted, even before it is dropped.
//
// Why a non-holder's keyed request can only be sold out: once remaining is 0, every item is held
// by a user in :buyers (a win takes stock and records its buyer in one atomic step), and nobody
// can win again until stock is released, which clears the flag (restock broadcast, probe, or a
// Release through this Guard) and with it this set. A user outside the set therefore has no win
// to replay: the store could only answer sold_out. A user whose win was released before the
// sell-out is outside the set too; the store would replay that released win, the Guard answers
// sold_out, which is what their retry now amounts to. Like the flag itself, the set is as fresh
// as the restock broadcast and the probe make it.
type guardHolders struct {
	gen   uint64
	users map[string]struct{}
}

// excludes reports whether a loaded holders set for the flag state gen shows that user holds
// nothing. Without a set for gen it says false: the caller must ask the store.
func (f *guardFlag) excludes(gen uint64, user string) bool {
	h := f.holders.Load()
	if h == nil || h.gen != gen {
		return false
	}
	_, ok := h.users[user]
	return !ok
}

// holdersLoaded reports whether the set for the flag state gen is in place.
func (f *guardFlag) holdersLoaded(gen uint64) bool {
	h := f.holders.Load()
	return h != nil && h.gen == gen
}

// loadHolders reads activity's holders for the flag state gen and publishes them, unless the
// flag changed meanwhile or a load for gen is already running. A failed load leaves no set, so
// keyed requests keep going to the store; the probe tries again.
func (g *Guard) loadHolders(ctx context.Context, activity string, f *guardFlag, gen uint64) {
	if f.loading.Swap(gen) == gen {
		return
	}
	users, err := g.Holders(ctx, activity)
	if err != nil {
		f.loading.CompareAndSwap(gen, 0)
		return
	}
	set := make(map[string]struct{}, len(users))
	for _, u := range users {
		set[u] = struct{}{}
	}
	h := &guardHolders{gen: gen, users: set}
	for {
		old := f.holders.Load()
		if f.state.Load() != gen || (old != nil && old.gen >= gen) {
			return
		}
		if f.holders.CompareAndSwap(old, h) {
			break
		}
	}
	// A restock between the check and the swap dropped the set before we published ours: drop
	// it again so it does not outlive its generation in memory (gen already keeps it unused).
	if f.state.Load() != gen {
		f.holders.CompareAndSwap(h, nil)
	}
}

// loadHoldersInBackground starts loadHolders off the request's path.
func (g *Guard) loadHoldersInBackground(activity string, f *guardFlag, gen uint64) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), holdersLoadTimeout)
		defer cancel()
		g.loadHolders(ctx, activity, f, gen)
	}()
}

// HoldersLoaded reports whether the guard has loaded the holders of activity's current sell-out,
// after which a flagged activity's refusals no longer ask the store who may replay a win.
func (g *Guard) HoldersLoaded(activity string) bool {
	f := (*g.flags.Load())[activity]
	if f == nil {
		return false
	}
	v := f.state.Load()
	return v&soldOutBit != 0 && f.holdersLoaded(v)
}
