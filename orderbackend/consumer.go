package orderbackend

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/money"
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

// DefaultLinger is ConsumerOptions.Linger's default: bigger transactions during a sale for a few
// milliseconds more until an order shows, far below a buyer's first poll. The measurements behind
// it: orderbackend/README.md, "Batches" (Figures).
const DefaultLinger = 10 * time.Millisecond

// ConsumerOptions tunes a Consumer; zero values take the defaults shown.
type ConsumerOptions struct {
	Group         string        // consumer group; DefaultGroup
	Name          string        // this consumer's name in the group: stable across restarts of one process (required)
	Batch         int           // wins per read; 64 (a Redis stream entry comes whole: a read may pass it by one entry's wins)
	Block         time.Duration // how long a read waits for new entries; 2s
	ClaimIdle     time.Duration // an entry pending this long belongs to a dead consumer; 30s
	ClaimEvery    time.Duration // how often to look for such entries (and re-read the definition); ClaimIdle/2
	MaxDeliveries int64         // deliveries after which a failing entry is dead-lettered; 5
	RetryDelay    time.Duration // pause before re-reading entries that failed; 200ms
	// Linger: when a read of a busy queue (the previous read had entries too, and this one got
	// its first within Linger) returns fewer than Batch entries, wait this long and read what
	// arrived meanwhile, so that one transaction carries them all; DefaultLinger, negative turns
	// it off. A lone win after a quiet spell goes at once. The pay window starts when the order
	// exists, so lingering costs buyers nothing but the few milliseconds until their order shows.
	Linger time.Duration
	// Listing gives an activity's unit price and title, which every new order carries (the
	// order's amount is the price times its qty); nil or a zero price: orders without a price.
	Listing func(activity string) Listing
	Now     func() time.Time
	Logger  *zap.Logger
	Metrics *Metrics
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
	if o.Linger == 0 {
		o.Linger = DefaultLinger
	}
	defaultRuntime(&o.Now, &o.Logger, &o.Metrics)
	return o
}

// ConsumerStore is what a Consumer needs of the store: its activity's queue, the definition (for
// the pay window and the stock), the buyers' result records, and Release for a poison win.
type ConsumerStore interface {
	ResultStore
	Activity(ctx context.Context, id string) (admission.Snapshot, error)
	Release(ctx context.Context, activity, reservationID string) (bool, error)
	EnsureGroup(ctx context.Context, activity, group string) error
	ReadGroup(ctx context.Context, activity, group, consumer string, count int, block time.Duration, pending bool) ([]admission.Win, error)
	Claim(ctx context.Context, activity, group, consumer string, minIdle time.Duration, count int) ([]admission.Win, error)
	Ack(ctx context.Context, activity, group string, ids ...string) error
	DeadLetter(ctx context.Context, activity, group string, w admission.Win, reason string) error
	DeadLetters(ctx context.Context, activity string, count int) ([]admission.Win, error)
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
	store     ConsumerStore
	repo      Repository
	activity  string
	opts      ConsumerOptions
	log       *zap.Logger
	payWithin atomic.Int64 // nanoseconds, from the activity's definition
}

// NewConsumer returns a consumer of activity's wins; Run starts it.
func NewConsumer(store ConsumerStore, repo Repository, activity string, opts ConsumerOptions) (*Consumer, error) {
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
	busy := false // the previous read of new entries had some
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
			asked := time.Now()
			ws, err = c.store.ReadGroup(ctx, c.activity, c.opts.Group, c.opts.Name, c.opts.Batch, c.opts.Block, false)
			// Linger only while wins keep coming: the previous read had some, and this one did not
			// wait long for its first (a read that waited longer than Linger shows a trickle, for
			// which lingering would only add the wait).
			if err == nil && busy && len(ws) < c.opts.Batch && c.opts.Linger > 0 && time.Since(asked) < c.opts.Linger {
				ws = c.linger(ctx, ws)
			}
			busy = err == nil && len(ws) > 0
		}
		if err != nil {
			if errors.Is(err, admission.ErrUnknownActivity) || ctx.Err() != nil {
				return c.stopped(ctx, err)
			}
			c.log.Warn("reading the wins queue failed; retrying", zap.Error(err))
			c.opts.Metrics.Retries.Add(1)
			// A failed read may have delivered entries whose answer was lost or refused (a node
			// no longer the master: redisclient.ErrNotMaster): they are this consumer's pending
			// ones now, so read those first.
			pending = true
			sleep(ctx, c.opts.RetryDelay)
			continue
		}
		if len(ws) == 0 {
			continue
		}
		done, err := c.handleBatch(ctx, ws)
		if err != nil {
			return c.stopped(ctx, err)
		}
		if !done {
			// Left pending: re-read later, which counts a delivery towards MaxDeliveries.
			pending = true
			sleep(ctx, c.opts.RetryDelay)
		}
	}
	return nil
}

// linger waits Linger and adds the entries that arrived meanwhile (up to Batch in all) to ws. A
// failed second read is not this batch's concern: ws is already this consumer's, and the next
// read meets the failure again.
func (c *Consumer) linger(ctx context.Context, ws []admission.Win) []admission.Win {
	if !sleep(ctx, c.opts.Linger) {
		return ws
	}
	more, err := c.store.ReadGroup(ctx, c.activity, c.opts.Group, c.opts.Name, c.opts.Batch-len(ws), 0, false)
	if err != nil {
		return ws
	}
	return append(ws, more...)
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

// step is what is left to do with an entry once its order transaction has run.
type step int

const (
	stepPending step = iota // it stays pending for a later delivery
	stepDone                // it was dead-lettered, which acknowledged it
	stepFinish              // its order exists: publish the buyer's result, then acknowledge
)

// finishing is an entry whose order exists, waiting for its result record and acknowledgement.
type finishing struct {
	w admission.Win
	o Order
}

// handleBatch processes one read batch: its well-formed wins go through one CreateOrders
// transaction, then every buyer's result is written and every finished entry acknowledged with
// one Ack. It reports false when an entry stays pending for a later attempt; an error only when
// ctx is done or the activity was deleted.
//
// The outcomes are those of handling the wins one by one (see CreateOrders). A batch that fails
// as a whole for a reason that does not pass by itself (a poison win among them) is handled win
// by win instead, so one bad win cannot hold the others back.
func (c *Consumer) handleBatch(ctx context.Context, ws []admission.Win) (bool, error) {
	allDone := true
	var (
		fin   []finishing
		batch []admission.Win
		ns    []NewOrder
	)
	// take files one entry's next step.
	take := func(w admission.Win, next step, o Order) {
		switch next {
		case stepPending:
			allDone = false
		case stepFinish:
			fin = append(fin, finishing{w, o})
		}
	}
	for _, w := range ws {
		n, err := c.newOrder(w)
		if err != nil {
			// Malformed: it stays pending until its MaxDeliveries-th delivery dead-letters it.
			next, o, err := c.settle(ctx, w, Order{}, false, err)
			if err != nil {
				return false, err
			}
			take(w, next, o)
			continue
		}
		batch, ns = append(batch, w), append(ns, n)
	}
	if len(batch) > 0 {
		outs, err := c.createOrders(ctx, ns)
		switch {
		case err == nil:
			if err := c.retryRefused(ctx, ns, outs); err != nil {
				return false, err
			}
			for i, w := range batch {
				next, o, err := c.settle(ctx, w, outs[i].Order, outs[i].Created, outs[i].Err)
				if err != nil {
					return false, err
				}
				take(w, next, o)
			}
		case ctx.Err() != nil:
			return false, ctx.Err()
		case len(batch) == 1:
			// Alone, the win's failure is its own (a poison re-read alone): no second transaction.
			next, o, err := c.settle(ctx, batch[0], Order{}, false, err)
			if err != nil {
				return false, err
			}
			take(batch[0], next, o)
		default:
			c.log.Warn("order batch failed; handling its wins one by one", zap.Int("wins", len(batch)), zap.Error(err))
			for _, w := range batch {
				next, o, err := c.process(ctx, w)
				if err != nil {
					return false, err
				}
				take(w, next, o)
			}
		}
	}
	return allDone, c.finish(ctx, fin)
}

// retryRefused gives the batch's refused wins a second chance after catching up with the
// activity's definition (its total may have been raised in the store a moment ago), in one more
// transaction; outs is updated in place.
func (c *Consumer) retryRefused(ctx context.Context, ns []NewOrder, outs []CreateOutcome) error {
	var idx []int
	for i, out := range outs {
		if errors.Is(out.Err, ErrWinRefused) {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return nil
	}
	if err := c.syncDefinition(ctx); err != nil {
		return err
	}
	again := make([]NewOrder, len(idx))
	for j, i := range idx {
		again[j] = ns[i]
	}
	retried, err := c.createOrders(ctx, again)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// Leave each its own failure to count towards MaxDeliveries, as the per-win path would.
		c.log.Warn("retrying refused wins failed", zap.Int("wins", len(idx)), zap.Error(err))
		for _, i := range idx {
			outs[i] = CreateOutcome{Err: err}
		}
		return nil
	}
	for j, i := range idx {
		outs[i] = retried[j]
	}
	return nil
}

// process runs one entry's order transaction on its own (handleBatch's fallback) and settles
// it; finishing a stepFinish is left to the caller.
func (c *Consumer) process(ctx context.Context, w admission.Win) (step, Order, error) {
	o, created, err := c.createOrder(ctx, w)
	if errors.Is(err, ErrWinRefused) {
		// The total may have been raised in the store a moment ago: catch up once, then retry.
		if err := c.syncDefinition(ctx); err != nil {
			return stepPending, Order{}, err
		}
		o, created, err = c.createOrder(ctx, w)
	}
	return c.settle(ctx, w, o, created, err)
}

// settle decides what follows a win's order transaction (o, created and err are its outcome):
// a refused win is dead-lettered, another failure leaves the entry pending until its
// MaxDeliveries-th delivery makes it poison, and an order (new or found again) is counted and
// left for finish. The error is only a done ctx or a deleted activity.
func (c *Consumer) settle(ctx context.Context, w admission.Win, o Order, created bool, err error) (step, Order, error) {
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return stepPending, Order{}, ctx.Err()
	case errors.Is(err, ErrWinRefused):
		return stepDone, Order{}, c.deadLetter(ctx, w, reasonRefused+err.Error(), false)
	default:
		if w.Deliveries < c.opts.MaxDeliveries {
			c.log.Warn("win failed; it stays pending", zap.String("reservation", w.ReservationID),
				zap.Int64("deliveries", w.Deliveries), zap.Error(err))
			return stepPending, Order{}, nil
		}
		return c.poison(ctx, w, err)
	}
	if created {
		c.opts.Metrics.OrdersCreated.Add(1)
	} else {
		c.opts.Metrics.Redelivered.Add(1)
	}
	return stepFinish, o, nil
}

// newOrder is the order a well-formed win of this consumer's activity asks for.
func (c *Consumer) newOrder(w admission.Win) (NewOrder, error) {
	if w.Activity != c.activity || w.ReservationID == "" || w.User == "" || w.Qty <= 0 {
		return NewOrder{}, fmt.Errorf("malformed win %+v", w)
	}
	var l Listing
	if c.opts.Listing != nil {
		l = c.opts.Listing(w.Activity)
	}
	amount := l.Price
	if amount.Amount > 0 {
		if w.Qty > money.MaxAmount/amount.Amount {
			return NewOrder{}, fmt.Errorf("win %+v: %d items of %s pass the largest amount", w, w.Qty, l.Price)
		}
		amount.Amount *= w.Qty
	}
	now := c.opts.Now()
	return NewOrder{
		Amount: amount, Title: l.Title,
		ID: NewOrderID(), Activity: w.Activity, ReservationID: w.ReservationID, User: w.User, Qty: w.Qty,
		// The window starts when the order exists, not at admission: a backlog after an outage
		// must not eat the buyer's time to pay.
		CreatedAt: now, ExpiresAt: now.Add(time.Duration(c.payWithin.Load())),
	}, nil
}

// createOrder runs one win's order transaction, waiting out database outages.
func (c *Consumer) createOrder(ctx context.Context, w admission.Win) (o Order, created bool, err error) {
	n, err := c.newOrder(w)
	if err != nil {
		return Order{}, false, err
	}
	err = c.retryDB(ctx, func() (err error) {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		defer cancel()
		o, created, err = c.repo.CreateOrder(actx, n)
		return err
	})
	return o, created, err
}

// createOrders runs a batch's order transaction, waiting out database outages.
func (c *Consumer) createOrders(ctx context.Context, ns []NewOrder) (outs []CreateOutcome, err error) {
	err = c.retryDB(ctx, func() (err error) {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		defer cancel()
		outs, err = c.repo.CreateOrders(actx, ns)
		return err
	})
	if err == nil {
		c.opts.Metrics.Batches.Add(1)
		c.opts.Metrics.BatchWins.Add(int64(len(ns)))
	}
	return outs, err
}

// publishers bounds the result records one batch writes at once. Concurrent calls let a Redis
// store's auto-pipeliner (redisstore.Options.AutoPipeline) send them together, and overlap the round
// trips otherwise.
const publishers = 16

// finish publishes the buyers' results and then acknowledges the entries with one Ack: an entry
// is done only when the buyer can see its order. A user's records are written one after another
// in batch order (publish reads before it writes); different users' at once, up to publishers.
// An entry whose record could not be written is not acknowledged.
func (c *Consumer) finish(ctx context.Context, fs []finishing) error {
	if len(fs) == 0 {
		return nil
	}
	errs := make([]error, len(fs))
	pub := func(i int) {
		o := fs[i].o
		err := c.retryStore(ctx, func() error { return publish(ctx, c.store, o.Activity, o.User, resultOf(o)) })
		if err != nil && !errors.Is(err, admission.ErrUnknownActivity) {
			errs[i] = err
		}
	}
	if len(fs) == 1 {
		pub(0)
	} else {
		var (
			byUser = map[string][]int{}
			users  []string
		)
		for i, f := range fs {
			if _, ok := byUser[f.o.User]; !ok {
				users = append(users, f.o.User)
			}
			byUser[f.o.User] = append(byUser[f.o.User], i)
		}
		var (
			next atomic.Int64
			wg   sync.WaitGroup
		)
		for range min(publishers, len(users)) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for u := next.Add(1) - 1; u < int64(len(users)); u = next.Add(1) - 1 {
					for _, i := range byUser[users[u]] {
						pub(i)
					}
				}
			}()
		}
		wg.Wait()
	}
	ids := make([]string, 0, len(fs))
	for i, f := range fs {
		if errs[i] == nil {
			ids = append(ids, f.w.ID)
		}
	}
	if len(ids) > 0 {
		if err := c.retryStore(ctx, func() error { return c.store.Ack(ctx, c.activity, c.opts.Group, ids...) }); err != nil {
			return err
		}
	}
	return errors.Join(errs...)
}

// poison dead-letters an entry that failed MaxDeliveries times and gives its items back to the
// store: the database never took them, so keeping them reserved would undersell.
func (c *Consumer) poison(ctx context.Context, w admission.Win, cause error) (step, Order, error) {
	// A commit whose answer was lost looks like a failure: never give up on a win that has an order.
	o, err := c.repo.OrderByReservation(ctx, w.Activity, w.ReservationID)
	switch {
	case err == nil && o.User == w.User && o.Qty == w.Qty:
		c.opts.Metrics.Redelivered.Add(1)
		return stepFinish, o, nil
	case err == nil:
		// The reservation's items went to another order: nothing to give back.
		return stepDone, Order{}, c.deadLetter(ctx, w, reasonRefused+cause.Error(), false)
	case !errors.Is(err, ErrNotFound):
		c.log.Warn("cannot check a failing win for an order; it stays pending",
			zap.String("reservation", w.ReservationID), zap.Error(err))
		return stepPending, Order{}, nil
	}
	reason := fmt.Sprintf("%sfailed %d deliveries: %v", reasonPoison, w.Deliveries, cause)
	return stepDone, Order{}, c.deadLetter(ctx, w, reason, true)
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
	case errors.Is(err, admission.ErrUnknownActivity), errors.Is(err, admission.ErrNotFound):
		c.opts.Metrics.ReleaseUnknown.Add(1) // final, as for the relay (Relay.relay)
		c.log.Warn("nothing to release: the store does not know the reservation", zap.String("reservation", reservation), zap.Error(err))
	case err != nil:
		c.log.Warn("nothing to release", zap.String("reservation", reservation), zap.Error(err))
	case released:
		c.opts.Metrics.Released.Add(1)
	}
	return nil
}

// MaxDeadLetters bounds the dead letters of one activity read in one call: the consumer's start
// (releaseDeadLetters) and the edge's admin release read at most that many.
const MaxDeadLetters = 100_000

// releaseDeadLetters finishes what a crash may have left undone after a win was dead-lettered
// (deadLetter stores the dead letter first, then releases a poison win, then tells the buyer):
// it repeats the (idempotent) release of every poison dead letter without an order, and writes
// the failed result of every dead letter without an order, refused ones too, so that no buyer's
// result says "queued" for a win that will never be an order. publish leaves a record that says
// failed already as it is.
func (c *Consumer) releaseDeadLetters(ctx context.Context) {
	var dead []admission.Win
	err := c.retryStore(ctx, func() (err error) { dead, err = c.store.DeadLetters(ctx, c.activity, MaxDeadLetters); return err })
	if err != nil {
		c.log.Warn("cannot list dead letters", zap.Error(err))
		return
	}
	for _, w := range dead {
		poison := strings.HasPrefix(w.Reason, reasonPoison)
		if !poison && !strings.HasPrefix(w.Reason, reasonRefused) {
			continue
		}
		if _, err := c.repo.OrderByReservation(ctx, w.Activity, w.ReservationID); !errors.Is(err, ErrNotFound) {
			if err == nil {
				c.log.Error("a dead-lettered win has an order; not releasing it", zap.String("reservation", w.ReservationID))
			}
			continue
		}
		if poison {
			if err := c.release(ctx, w.ReservationID); err != nil {
				c.log.Warn("cannot release a dead letter", zap.String("reservation", w.ReservationID), zap.Error(err))
				return
			}
		}
		r := admission.Result{Code: resultFailed, ReservationID: w.ReservationID}
		err := c.retryStore(ctx, func() error { return publish(ctx, c.store, c.activity, w.User, r) })
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			c.log.Warn("cannot tell the buyer of a dead letter", zap.String("user", w.User), zap.Error(err))
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
