package orderbackend

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// DefaultGroup is the consumer group order consumers join.
const DefaultGroup = "orders"

// DefaultPayWithin is the payment window of an activity defined without one.
const DefaultPayWithin = 15 * time.Minute

// Dead-letter reasons start with one of these words. A refused win is not released in the store
// (the database had no stock for it, so the store must not sell it again); a poison win is.
const (
	reasonRefused = "refused: "
	reasonPoison  = "poison: "
)

// maxReason keeps dead-letter reasons within what the stores accept.
const maxReason = 1000

// ConsumerOptions tunes a Consumer; zero values take the defaults shown.
type ConsumerOptions struct {
	Group         string        // consumer group; DefaultGroup
	Name          string        // this consumer's name in the group: stable across restarts of one process (required)
	Batch         int           // entries per read; 64
	Block         time.Duration // how long a read waits for new entries; 2s
	ClaimIdle     time.Duration // an entry pending this long belongs to a dead consumer; 30s
	ClaimEvery    time.Duration // how often to look for such entries (and re-read the definition); ClaimIdle/2
	MaxDeliveries int64         // deliveries after which a failing entry is dead-lettered; 5
	RetryDelay    time.Duration // pause before re-reading entries that failed; 200ms
	Now           func() time.Time
	Logger        *zap.Logger
	Metrics       *Metrics
}

func (o ConsumerOptions) withDefaults() ConsumerOptions {
	if o.Group == "" {
		o.Group = DefaultGroup
	}
	if o.Batch <= 0 {
		o.Batch = 64
	}
	if o.Block <= 0 {
		o.Block = 2 * time.Second
	}
	if o.ClaimIdle <= 0 {
		o.ClaimIdle = 30 * time.Second
	}
	if o.ClaimEvery <= 0 {
		o.ClaimEvery = o.ClaimIdle / 2
	}
	if o.MaxDeliveries <= 0 {
		o.MaxDeliveries = 5
	}
	if o.RetryDelay <= 0 {
		o.RetryDelay = 200 * time.Millisecond
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Metrics == nil {
		o.Metrics = new(Metrics)
	}
	return o
}

// Consumer turns one activity's wins into orders as a member of the queue's consumer group.
//
// On start it re-reads its own pending entries (a previous run of it may have died between the
// database commit and the acknowledgement), then reads new ones, and periodically claims entries
// a dead consumer left pending. An entry is acknowledged only after its order is committed and the
// buyer's result record written, so a crash anywhere repeats the work, and the order's unique
// reservation id makes the repetition harmless. Outages of the database or the store are waited
// out; only an entry that fails for another reason MaxDeliveries times is dead-lettered.
type Consumer struct {
	store     admission.Store
	repo      Repository
	activity  string
	opts      ConsumerOptions
	log       *zap.Logger
	payWithin atomic.Int64 // nanoseconds, from the activity's definition
}

// NewConsumer returns a consumer of activity's wins; Run starts it.
func NewConsumer(store admission.Store, repo Repository, activity string, opts ConsumerOptions) (*Consumer, error) {
	if !admission.ValidActivityID(activity) {
		return nil, fmt.Errorf("new consumer: %w: activity id %q", admission.ErrBadInput, activity)
	}
	if opts.Name == "" {
		return nil, fmt.Errorf("new consumer for %s: %w: a consumer name is required", activity, admission.ErrBadInput)
	}
	opts = opts.withDefaults()
	c := &Consumer{store: store, repo: repo, activity: activity, opts: opts}
	c.log = opts.Logger.With(zap.String("activity", activity), zap.String("consumer", opts.Name))
	c.payWithin.Store(int64(DefaultPayWithin))
	return c, nil
}

// Run consumes until ctx is done (returning nil) or the activity is deleted from the store.
func (c *Consumer) Run(ctx context.Context) error {
	err := c.retryStore(ctx, func() error { return c.store.EnsureGroup(ctx, c.activity, c.opts.Group) })
	if err != nil {
		return c.stopped(ctx, err)
	}
	if err := c.syncDefinition(ctx); err != nil {
		return c.stopped(ctx, err)
	}
	c.releaseDeadLetters(ctx)

	pending, nextClaim := true, time.Now()
	for ctx.Err() == nil {
		var (
			ws  []admission.Win
			err error
		)
		switch {
		case pending:
			ws, err = c.store.ReadGroup(ctx, c.activity, c.opts.Group, c.opts.Name, c.opts.Batch, 0, true)
			if err == nil && len(ws) == 0 {
				pending = false
				continue
			}
		case !time.Now().Before(nextClaim):
			nextClaim = time.Now().Add(c.opts.ClaimEvery)
			if err = c.syncDefinition(ctx); err == nil {
				ws, err = c.store.Claim(ctx, c.activity, c.opts.Group, c.opts.Name, c.opts.ClaimIdle, c.opts.Batch)
			}
		default:
			ws, err = c.store.ReadGroup(ctx, c.activity, c.opts.Group, c.opts.Name, c.opts.Batch, c.opts.Block, false)
		}
		if err != nil {
			if errors.Is(err, admission.ErrUnknownActivity) || ctx.Err() != nil {
				return c.stopped(ctx, err)
			}
			c.log.Warn("reading the wins queue failed; retrying", zap.Error(err))
			c.opts.Metrics.Retries.Add(1)
			sleep(ctx, c.opts.RetryDelay)
			continue
		}
		failed := false
		for _, w := range ws {
			done, err := c.handle(ctx, w)
			if err != nil {
				return c.stopped(ctx, err)
			}
			failed = failed || !done
		}
		if failed {
			// Left pending: re-read later, which counts a delivery towards MaxDeliveries.
			pending = true
			sleep(ctx, c.opts.RetryDelay)
		}
	}
	return nil
}

// stopped turns the error that ended Run into its result: nil for a canceled context or a
// deleted activity, the error otherwise.
func (c *Consumer) stopped(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return nil
	case errors.Is(err, admission.ErrUnknownActivity):
		c.log.Info("activity deleted; consumer stops")
		return nil
	}
	return fmt.Errorf("consumer %s of %s: %w", c.opts.Name, c.activity, err)
}

// syncDefinition reads the activity's definition and brings the database stock row to its total;
// it runs at start and with every claim round, so a redefinition reaches the database.
func (c *Consumer) syncDefinition(ctx context.Context) error {
	var snap admission.Snapshot
	err := c.retryStore(ctx, func() (err error) { snap, err = c.store.Activity(ctx, c.activity); return err })
	if err != nil {
		return err
	}
	if snap.PayWithin > 0 {
		c.payWithin.Store(int64(snap.PayWithin))
	}
	return c.retryDB(ctx, func() error { return c.repo.EnsureStock(ctx, c.activity, snap.Stock) })
}

// handle processes one delivered entry. It reports false when the entry stays pending for a later
// attempt; an error only when ctx is done or the activity was deleted.
func (c *Consumer) handle(ctx context.Context, w admission.Win) (bool, error) {
	o, created, err := c.createOrder(ctx, w)
	if errors.Is(err, ErrWinRefused) {
		// The total may have been raised in the store a moment ago: catch up once, then retry.
		if err := c.syncDefinition(ctx); err != nil {
			return false, err
		}
		o, created, err = c.createOrder(ctx, w)
	}
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return false, ctx.Err()
	case errors.Is(err, ErrWinRefused):
		return true, c.deadLetter(ctx, w, reasonRefused+err.Error(), false)
	default:
		if w.Deliveries < c.opts.MaxDeliveries {
			c.log.Warn("win failed; it stays pending", zap.String("reservation", w.ReservationID),
				zap.Int64("deliveries", w.Deliveries), zap.Error(err))
			return false, nil
		}
		return c.poison(ctx, w, err)
	}
	if created {
		c.opts.Metrics.OrdersCreated.Add(1)
	} else {
		c.opts.Metrics.Redelivered.Add(1)
	}
	return true, c.finish(ctx, w, o)
}

// createOrder runs the order transaction, waiting out database outages.
func (c *Consumer) createOrder(ctx context.Context, w admission.Win) (o Order, created bool, err error) {
	now := c.opts.Now()
	n := NewOrder{
		ID: NewOrderID(), Activity: w.Activity, ReservationID: w.ReservationID, User: w.User, Qty: w.Qty,
		// The window starts when the order exists, not at admission: a backlog after an outage
		// must not eat the buyer's time to pay.
		CreatedAt: now, ExpiresAt: now.Add(time.Duration(c.payWithin.Load())),
	}
	if w.Activity != c.activity || w.ReservationID == "" || w.User == "" || w.Qty <= 0 {
		return Order{}, false, fmt.Errorf("malformed win %+v", w)
	}
	err = c.retryDB(ctx, func() (err error) {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		defer cancel()
		o, created, err = c.repo.CreateOrder(actx, n)
		return err
	})
	return o, created, err
}

// finish publishes the buyer's result and acknowledges the entry, in that order: an entry is done
// only when the buyer can see its order.
func (c *Consumer) finish(ctx context.Context, w admission.Win, o Order) error {
	err := c.retryStore(ctx, func() error { return publish(ctx, c.store, o.Activity, o.User, resultOf(o)) })
	if err != nil && !errors.Is(err, admission.ErrUnknownActivity) {
		return err
	}
	return c.retryStore(ctx, func() error { return c.store.Ack(ctx, c.activity, c.opts.Group, w.ID) })
}

// poison dead-letters an entry that failed MaxDeliveries times and gives its items back to the
// store: the database never took them, so keeping them reserved would undersell.
func (c *Consumer) poison(ctx context.Context, w admission.Win, cause error) (bool, error) {
	// A commit whose answer was lost looks like a failure: never give up on a win that has an order.
	o, err := c.repo.OrderByReservation(ctx, w.Activity, w.ReservationID)
	switch {
	case err == nil && o.User == w.User && o.Qty == w.Qty:
		c.opts.Metrics.Redelivered.Add(1)
		return true, c.finish(ctx, w, o)
	case err == nil:
		// The reservation's items went to another order: nothing to give back.
		return true, c.deadLetter(ctx, w, reasonRefused+cause.Error(), false)
	case !errors.Is(err, ErrNotFound):
		c.log.Warn("cannot check a failing win for an order; it stays pending",
			zap.String("reservation", w.ReservationID), zap.Error(err))
		return false, nil
	}
	reason := fmt.Sprintf("%sfailed %d deliveries: %v", reasonPoison, w.Deliveries, cause)
	return true, c.deadLetter(ctx, w, reason, true)
}

// deadLetter moves an entry to the dead-letter queue (which acknowledges it), releases its
// reservation when asked, and tells the buyer. The dead letter comes first: a crash before the
// release leaves stock held, which releaseDeadLetters repairs at the next start, whereas a release
// first and a crash could turn a released win into an order.
func (c *Consumer) deadLetter(ctx context.Context, w admission.Win, reason string, release bool) error {
	if len(reason) > maxReason {
		reason = reason[:maxReason]
	}
	c.log.Error("win dead-lettered", zap.String("reservation", w.ReservationID), zap.String("user", w.User),
		zap.Int64("qty", w.Qty), zap.Int64("deliveries", w.Deliveries), zap.String("reason", reason))
	if err := c.retryStore(ctx, func() error { return c.store.DeadLetter(ctx, c.activity, c.opts.Group, w, reason) }); err != nil {
		return err
	}
	c.opts.Metrics.DeadLettered.Add(1)
	if !release {
		c.opts.Metrics.Refused.Add(1)
	} else if err := c.release(ctx, w.ReservationID); err != nil {
		return err
	}
	// The entry is dead either way; a record the store refuses (a malformed win) is only logged.
	r := admission.Result{Code: resultFailed, ReservationID: w.ReservationID}
	err := c.retryStore(ctx, func() error { return publish(ctx, c.store, c.activity, w.User, r) })
	if err != nil && ctx.Err() == nil {
		c.log.Warn("cannot tell the buyer of a dead letter", zap.String("user", w.User), zap.Error(err))
		return nil
	}
	return err
}

// release gives a reservation back in the store. Only a done ctx is an error: the store's definite
// refusals (unknown reservation or activity, a malformed id) mean there is nothing to give back.
func (c *Consumer) release(ctx context.Context, reservation string) error {
	var released bool
	err := c.retryStore(ctx, func() (err error) { released, err = c.store.Release(ctx, c.activity, reservation); return err })
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		c.log.Warn("nothing to release", zap.String("reservation", reservation), zap.Error(err))
	case released:
		c.opts.Metrics.Released.Add(1)
	}
	return nil
}

// releaseDeadLetters repeats the (idempotent) release of every poison dead letter, closing the
// window between dead-lettering and releasing that a crash may have left open.
func (c *Consumer) releaseDeadLetters(ctx context.Context) {
	dead, err := c.store.DeadLetters(ctx, c.activity, 100_000)
	if err != nil {
		c.log.Warn("cannot list dead letters", zap.Error(err))
		return
	}
	for _, w := range dead {
		if !strings.HasPrefix(w.Reason, reasonPoison) {
			continue
		}
		if _, err := c.repo.OrderByReservation(ctx, w.Activity, w.ReservationID); !errors.Is(err, ErrNotFound) {
			if err == nil {
				c.log.Error("a dead-lettered win has an order; not releasing it", zap.String("reservation", w.ReservationID))
			}
			continue
		}
		if err := c.release(ctx, w.ReservationID); err != nil {
			c.log.Warn("cannot release a dead letter", zap.String("reservation", w.ReservationID), zap.Error(err))
			return
		}
	}
}

func (c *Consumer) retryDB(ctx context.Context, fn func() error) error {
	return retry(ctx, transientDB, c.onRetry("database"), fn)
}

func (c *Consumer) retryStore(ctx context.Context, fn func() error) error {
	return retry(ctx, transientStore, c.onRetry("store"), fn)
}

func (c *Consumer) onRetry(what string) func(error) {
	return func(err error) {
		c.opts.Metrics.Retries.Add(1)
		c.log.Warn(what+" unavailable; retrying", zap.Error(err))
	}
}
