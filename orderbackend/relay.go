package orderbackend

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// RelayOptions tunes a Relay; zero values take the defaults shown.
type RelayOptions struct {
	Every   time.Duration // polling interval when not woken; 1s
	Batch   int           // outbox rows per read; 100
	Logger  *zap.Logger
	Metrics *Metrics
}

// RelayStore is what a Relay needs of the store: a cancelled order's Release and the buyer's
// result record.
type RelayStore interface {
	ResultStore
	Release(ctx context.Context, activity, reservationID string) (bool, error)
}

// Relay carries committed order changes from the outbox to the store: a cancelled order's
// reservation is released (the store's Release is exactly-once, so a row relayed twice is
// harmless) and every change is written to the buyer's result record. A row is deleted only after
// its effect is done.
type Relay struct {
	store RelayStore
	repo  Repository
	opts  RelayOptions
	wake  chan struct{}
}

// NewRelay returns a relay from repo's outbox to store; Run starts it.
func NewRelay(store RelayStore, repo Repository, opts RelayOptions) *Relay {
	if opts.Every <= 0 {
		opts.Every = time.Second
	}
	if opts.Batch <= 0 {
		opts.Batch = 100
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Metrics == nil {
		opts.Metrics = new(Metrics)
	}
	return &Relay{store: store, repo: repo, opts: opts, wake: make(chan struct{}, 1)}
}

// Wake makes a running relay look at the outbox now instead of at its next tick.
func (r *Relay) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run relays until ctx is done. Failures are logged and retried at the next round.
func (r *Relay) Run(ctx context.Context) error {
	t := time.NewTicker(r.opts.Every)
	defer t.Stop()
	for {
		if _, err := r.Once(ctx); err != nil && ctx.Err() == nil {
			r.opts.Logger.Warn("relaying the outbox failed", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-r.wake:
		}
	}
}

// Once relays the outbox until it is empty and returns how many rows it relayed.
func (r *Relay) Once(ctx context.Context) (int, error) {
	total := 0
	for {
		rows, err := r.repo.Outbox(ctx, r.opts.Batch)
		if err != nil {
			return total, err
		}
		for _, e := range rows {
			if err := r.relay(ctx, e); err != nil {
				return total, err
			}
			total++
		}
		if len(rows) < r.opts.Batch {
			return total, nil
		}
	}
}

func (r *Relay) relay(ctx context.Context, e OutboxEntry) error {
	var code string
	switch e.Kind {
	case OutboxRelease:
		code = string(StatusCancelled)
	case OutboxPaid:
		code = string(StatusPaid)
	default:
		return fmt.Errorf("outbox row %d: unknown kind %q", e.ID, e.Kind)
	}
	// The record first, the release second: once the items are back the buyer may win again, and
	// this record must not overwrite that newer one.
	res := admission.Result{Code: code, ReservationID: e.ReservationID, OrderID: e.OrderID}
	if err := publish(ctx, r.store, e.Activity, e.User, res); err != nil && !errors.Is(err, admission.ErrUnknownActivity) {
		return fmt.Errorf("outbox row %d: result: %w", e.ID, err)
	}
	if e.Kind == OutboxRelease {
		released, err := r.store.Release(ctx, e.Activity, e.ReservationID)
		switch {
		case errors.Is(err, admission.ErrUnknownActivity), errors.Is(err, admission.ErrNotFound):
			// Final, never retried: the store writes a win's reservation in the same atomic step
			// as the stock it takes and never removes it, so a store that does not know it never
			// took that stock, or lost it together with the win (a failover or restart that lost
			// the win's write), or the activity was deleted (and maybe defined again, with its
			// own stock). Already released answers false, not this. Keeping the row would block
			// the outbox behind it. Keys removed behind the store's back (an evicting
			// maxmemory-policy, an operator) are the exception: reconcile shows such a loss.
			r.opts.Metrics.ReleaseUnknown.Add(1)
			r.opts.Logger.Error("the store does not know the reservation of a cancelled order; nothing released, the release is dropped (run reconcile if the activity was not deleted)",
				zap.String("activity", e.Activity), zap.String("order", e.OrderID), zap.String("user", e.User),
				zap.String("reservation", e.ReservationID), zap.Error(err))
		case err != nil:
			return fmt.Errorf("outbox row %d: release %s: %w", e.ID, e.ReservationID, err)
		case released:
			r.opts.Metrics.Released.Add(1)
		}
	}
	if err := r.repo.DeleteOutbox(ctx, e.ID); err != nil {
		return fmt.Errorf("outbox row %d: %w", e.ID, err)
	}
	return nil
}
