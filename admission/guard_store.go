package admission

import (
	"context"
	"errors"
	"time"
)

// The rest of Store, each call through a breaker. Calls that prove stock is back (a release, a
// redefinition, a deletion, a positive stock reading) clear this node's flag at once.

var _ Store = (*Guard)(nil)

func isUnknownActivity(err error) bool { return errors.Is(err, ErrUnknownActivity) }

// Define implements Store.
func (g *Guard) Define(ctx context.Context, a Activity, force bool) (Activity, error) {
	got, err := call(g.cb, "define", a.ID, func() (Activity, error) { return g.store.Define(ctx, a, force) })
	if err == nil {
		g.restocked(got.ID)
	}
	return got, err
}

// Activity implements Store.
func (g *Guard) Activity(ctx context.Context, id string) (Snapshot, error) {
	snap, err := call(g.cb, "activity", id, func() (Snapshot, error) { return g.store.Activity(ctx, id) })
	if err == nil {
		g.observe(id, snap.Remaining)
	}
	return snap, err
}

// Activities implements Store.
func (g *Guard) Activities(ctx context.Context) ([]string, error) {
	return call(g.cb, "activities", "", func() ([]string, error) { return g.store.Activities(ctx) })
}

// Delete implements Store.
func (g *Guard) Delete(ctx context.Context, id string, force bool) error {
	_, err := call(g.cb, "delete", id, func() (struct{}, error) { return struct{}{}, g.store.Delete(ctx, id, force) })
	if err == nil {
		g.restocked(id)
	}
	return err
}

// Release implements Store.
func (g *Guard) Release(ctx context.Context, activity, reservationID string) (bool, error) {
	ok, err := call(g.cb, "release", activity, func() (bool, error) { return g.store.Release(ctx, activity, reservationID) })
	if ok {
		g.restocked(activity)
	}
	return ok, err
}

// Remaining implements Store.
func (g *Guard) Remaining(ctx context.Context, activity string) (int64, error) {
	n, err := call(g.cb, "remaining", activity, func() (int64, error) { return g.store.Remaining(ctx, activity) })
	if err == nil {
		g.observe(activity, n)
	} else if isUnknownActivity(err) && g.SoldOut(activity) {
		g.restocked(activity)
	}
	return n, err
}

// Holders implements Store.
func (g *Guard) Holders(ctx context.Context, activity string) ([]string, error) {
	return call(g.cb, "holders", activity, func() ([]string, error) { return g.store.Holders(ctx, activity) })
}

// observe clears a flag that a fresh stock reading contradicts.
func (g *Guard) observe(activity string, remaining int64) {
	if remaining > 0 && g.SoldOut(activity) {
		g.restocked(activity)
	}
}

// SetResult implements Store.
func (g *Guard) SetResult(ctx context.Context, activity, user string, r Result) error {
	_, err := call(g.cb, "set result", activity, func() (struct{}, error) {
		return struct{}{}, g.store.SetResult(ctx, activity, user, r)
	})
	return err
}

// GetResult implements Store.
func (g *Guard) GetResult(ctx context.Context, activity, user string) (Result, error) {
	return call(g.cb, "get result", activity, func() (Result, error) { return g.store.GetResult(ctx, activity, user) })
}

// AppendResult implements Store.
func (g *Guard) AppendResult(ctx context.Context, dst []byte, activity, user string) ([]byte, string, error) {
	var code string
	out, err := call(g.cb, "get result", activity, func() ([]byte, error) {
		var (
			b   []byte
			err error
		)
		b, code, err = g.store.AppendResult(ctx, dst, activity, user)
		return b, err
	})
	if err != nil {
		return dst, "", err
	}
	return out, code, nil
}

// Restocks implements Store by subscribing to the wrapped store's broadcasts.
func (g *Guard) Restocks(ctx context.Context) (<-chan string, error) {
	return call(g.cb, "restocks", "", func() (<-chan string, error) { return g.store.Restocks(ctx) })
}

// EnsureGroup implements Queue.
func (g *Guard) EnsureGroup(ctx context.Context, activity, group string) error {
	_, err := call(g.qcb, "ensure group", activity, func() (struct{}, error) {
		return struct{}{}, g.store.EnsureGroup(ctx, activity, group)
	})
	return err
}

// ReadGroup implements Queue.
func (g *Guard) ReadGroup(ctx context.Context, activity, group, consumer string, count int, block time.Duration, pending bool) ([]Win, error) {
	return call(g.qcb, "read group", activity, func() ([]Win, error) {
		return g.store.ReadGroup(ctx, activity, group, consumer, count, block, pending)
	})
}

// Ack implements Queue.
func (g *Guard) Ack(ctx context.Context, activity, group string, ids ...string) error {
	_, err := call(g.qcb, "ack", activity, func() (struct{}, error) {
		return struct{}{}, g.store.Ack(ctx, activity, group, ids...)
	})
	return err
}

// Claim implements Queue.
func (g *Guard) Claim(ctx context.Context, activity, group, consumer string, minIdle time.Duration, count int) ([]Win, error) {
	return call(g.qcb, "claim", activity, func() ([]Win, error) {
		return g.store.Claim(ctx, activity, group, consumer, minIdle, count)
	})
}

// DeadLetter implements Queue.
func (g *Guard) DeadLetter(ctx context.Context, activity, group string, w Win, reason string) error {
	_, err := call(g.qcb, "dead letter", activity, func() (struct{}, error) {
		return struct{}{}, g.store.DeadLetter(ctx, activity, group, w, reason)
	})
	return err
}

// DeadLetters implements Queue.
func (g *Guard) DeadLetters(ctx context.Context, activity string, count int) ([]Win, error) {
	return call(g.qcb, "dead letters", activity, func() ([]Win, error) { return g.store.DeadLetters(ctx, activity, count) })
}

// Backlog implements Queue.
func (g *Guard) Backlog(ctx context.Context, activity, group string) (int64, error) {
	return call(g.qcb, "backlog", activity, func() (int64, error) { return g.store.Backlog(ctx, activity, group) })
}
