package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/localstore"
)

// reopenableLocal is the pooled store local: the folder's localstore.Store, which a reload replaces
// once a commit has failed (a full disk), under the same guard, order backend and handlers. A
// failed localstore.Store answers every call with an error until the folder is opened again, and the
// pool keeps one store per folder for as long as any configuration uses it, so without this a
// failed store would outlive every reload.
type reopenableLocal struct {
	dir  string
	opts localstore.Options

	mu     sync.Mutex // serialises reopen
	cur    atomic.Pointer[localstore.Store]
	broken atomic.Bool // the last reopen failed: cur is closed
	// before holds the counters of the stores reopen replaced, so Stats stays monotonic.
	before localstore.Stats
}

// errLocalReopening is what a call meets while the failed store is closed and the folder not yet
// open again: a store error, hence 503 busy.
var errLocalReopening = errors.New("store local: the folder is being opened again")

func openReopenableLocal(dir string, opts localstore.Options) (*reopenableLocal, error) {
	st, err := localstore.Open(dir, opts)
	if err != nil {
		return nil, err
	}
	r := &reopenableLocal{dir: dir, opts: opts}
	r.cur.Store(st)
	return r, nil
}

// reopen opens the folder again when the store has failed (or the last reopen did), which loads
// what was committed; it does nothing to a store that works. It reports whether it reopened.
func (r *reopenableLocal) reopen() (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.cur.Load()
	if old.Failure() == nil && !r.broken.Load() {
		return false, nil
	}
	if !r.broken.Load() {
		_ = old.Close() // releases the folder's lock; every call on it fails, as it did
		r.before = addLocalStats(r.before, old.Stats())
	}
	st, err := localstore.Open(r.dir, r.opts)
	if err != nil {
		r.broken.Store(true)
		return false, fmt.Errorf("open the folder again after a failed commit: %w", err)
	}
	r.broken.Store(false)
	r.cur.Store(st)
	return true, nil
}

// Stats returns the commit counters of every store this folder has had in this process, for the
// metrics, which must never go down.
func (r *reopenableLocal) Stats() localstore.Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.broken.Load() {
		return r.before
	}
	return addLocalStats(r.before, r.cur.Load().Stats())
}

func addLocalStats(a, b localstore.Stats) localstore.Stats {
	return localstore.Stats{
		Commits: a.Commits + b.Commits, Changes: a.Changes + b.Changes, CommitTime: a.CommitTime + b.CommitTime,
		Checkpoints: a.Checkpoints + b.Checkpoints, CheckpointsFailed: a.CheckpointsFailed + b.CheckpointsFailed,
		CheckpointTime: a.CheckpointTime + b.CheckpointTime,
		Replayed:       a.Replayed + b.Replayed, Unringed: a.Unringed + b.Unringed,
	}
}

// store is the current localstore.Store, or an error while it is closed for a reopen that failed.
func (r *reopenableLocal) store() (*localstore.Store, error) {
	if r.broken.Load() {
		return nil, errLocalReopening
	}
	return r.cur.Load(), nil
}

// Define implements admission.Store.
func (r *reopenableLocal) Define(ctx context.Context, a admission.Activity, force bool) (admission.Activity, error) {
	s, err := r.store()
	if err != nil {
		return admission.Activity{}, err
	}
	return s.Define(ctx, a, force)
}

// Activity implements admission.Store.
func (r *reopenableLocal) Activity(ctx context.Context, id string) (admission.Snapshot, error) {
	s, err := r.store()
	if err != nil {
		return admission.Snapshot{}, err
	}
	return s.Activity(ctx, id)
}

// Activities implements admission.Store.
func (r *reopenableLocal) Activities(ctx context.Context) ([]string, error) {
	s, err := r.store()
	if err != nil {
		return nil, err
	}
	return s.Activities(ctx)
}

// Delete implements admission.Store.
func (r *reopenableLocal) Delete(ctx context.Context, id string, force bool) error {
	s, err := r.store()
	if err != nil {
		return err
	}
	return s.Delete(ctx, id, force)
}

// Admit implements admission.Store.
func (r *reopenableLocal) Admit(ctx context.Context, req admission.Request) (admission.Decision, error) {
	s, err := r.store()
	if err != nil {
		return admission.Decision{}, err
	}
	return s.Admit(ctx, req)
}

// Release implements admission.Store.
func (r *reopenableLocal) Release(ctx context.Context, activity, reservationID string) (bool, error) {
	s, err := r.store()
	if err != nil {
		return false, err
	}
	return s.Release(ctx, activity, reservationID)
}

// Remaining implements admission.Store.
func (r *reopenableLocal) Remaining(ctx context.Context, activity string) (int64, error) {
	s, err := r.store()
	if err != nil {
		return 0, err
	}
	return s.Remaining(ctx, activity)
}

// Holders implements admission.Store.
func (r *reopenableLocal) Holders(ctx context.Context, activity string) ([]string, error) {
	s, err := r.store()
	if err != nil {
		return nil, err
	}
	return s.Holders(ctx, activity)
}

// SetResult implements admission.Store.
func (r *reopenableLocal) SetResult(ctx context.Context, activity, user string, res admission.Result) error {
	s, err := r.store()
	if err != nil {
		return err
	}
	return s.SetResult(ctx, activity, user, res)
}

// GetResult implements admission.Store.
func (r *reopenableLocal) GetResult(ctx context.Context, activity, user string) (admission.Result, error) {
	s, err := r.store()
	if err != nil {
		return admission.Result{}, err
	}
	return s.GetResult(ctx, activity, user)
}

// AppendResult implements admission.Store.
func (r *reopenableLocal) AppendResult(ctx context.Context, dst []byte, activity, user string) ([]byte, string, error) {
	s, err := r.store()
	if err != nil {
		return dst, "", err
	}
	return s.AppendResult(ctx, dst, activity, user)
}

// Restocks implements admission.Store. A subscription is to the store of the moment; the Guard
// subscribes again when it ends, and probes the flagged activities meanwhile.
func (r *reopenableLocal) Restocks(ctx context.Context) (<-chan string, error) {
	s, err := r.store()
	if err != nil {
		return nil, err
	}
	return s.Restocks(ctx)
}

// EnsureGroup implements admission.Queue.
func (r *reopenableLocal) EnsureGroup(ctx context.Context, activity, group string) error {
	s, err := r.store()
	if err != nil {
		return err
	}
	return s.EnsureGroup(ctx, activity, group)
}

// ReadGroup implements admission.Queue.
func (r *reopenableLocal) ReadGroup(ctx context.Context, activity, group, consumer string, count int, block time.Duration, pending bool) ([]admission.Win, error) {
	s, err := r.store()
	if err != nil {
		return nil, err
	}
	return s.ReadGroup(ctx, activity, group, consumer, count, block, pending)
}

// Ack implements admission.Queue.
func (r *reopenableLocal) Ack(ctx context.Context, activity, group string, ids ...string) error {
	s, err := r.store()
	if err != nil {
		return err
	}
	return s.Ack(ctx, activity, group, ids...)
}

// Claim implements admission.Queue.
func (r *reopenableLocal) Claim(ctx context.Context, activity, group, consumer string, minIdle time.Duration, count int) ([]admission.Win, error) {
	s, err := r.store()
	if err != nil {
		return nil, err
	}
	return s.Claim(ctx, activity, group, consumer, minIdle, count)
}

// DeadLetter implements admission.Queue.
func (r *reopenableLocal) DeadLetter(ctx context.Context, activity, group string, w admission.Win, reason string) error {
	s, err := r.store()
	if err != nil {
		return err
	}
	return s.DeadLetter(ctx, activity, group, w, reason)
}

// DeadLetters implements admission.Queue.
func (r *reopenableLocal) DeadLetters(ctx context.Context, activity string, count int) ([]admission.Win, error) {
	s, err := r.store()
	if err != nil {
		return nil, err
	}
	return s.DeadLetters(ctx, activity, count)
}

// Backlog implements admission.Queue.
func (r *reopenableLocal) Backlog(ctx context.Context, activity, group string) (int64, error) {
	s, err := r.store()
	if err != nil {
		return 0, err
	}
	return s.Backlog(ctx, activity, group)
}

// Close closes the current store; after a failed reopen there is nothing open.
func (r *reopenableLocal) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.broken.Load() {
		return nil
	}
	return r.cur.Load().Close()
}

var _ admission.Store = (*reopenableLocal)(nil)
