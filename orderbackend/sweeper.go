package orderbackend

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// SweeperOptions tunes a Sweeper; zero values take the defaults shown.
type SweeperOptions struct {
	Every time.Duration // time between sweeps; 1s
	Batch int           // orders cancelled per transaction, and payments settled per sweep; 100
	// Payments is the provider the sweeper asks about attempts without outcome and refunds
	// through; nil (a backend without the order API, which records no payments) settles nothing.
	Payments Payments
	// SettleAfter is how long an attempt may stay without outcome before the sweeper asks the
	// provider. It must be longer than a charge call may take (the Backend gives the API half of
	// it as ChargeTimeout): a lookup during the call could find nothing yet and end the attempt
	// as failed, and a success whose answer is then lost would stand unseen; 1m.
	SettleAfter time.Duration
	Now         func() time.Time
	Logger      *zap.Logger
	Metrics     *Metrics
	OnCancel    func() // called after a sweep cancelled or paid orders (wakes the relay)
}

// Sweeper settles payment attempts left without outcome and refunds charges that could not pay
// their order, then cancels orders whose payment window closed. Each batch is one transaction that cancels
// the orders, gives their items back to the database stock and writes the releases to the outbox;
// any number of sweepers may run (on PostgreSQL they take disjoint batches).
type Sweeper struct {
	repo Repository
	opts SweeperOptions
}

// NewSweeper returns a sweeper over repo; Run starts it.
func NewSweeper(repo Repository, opts SweeperOptions) *Sweeper {
	if opts.Every <= 0 {
		opts.Every = time.Second
	}
	if opts.Batch <= 0 {
		opts.Batch = 100
	}
	if opts.SettleAfter <= 0 {
		opts.SettleAfter = time.Minute
	}
	defaultRuntime(&opts.Now, &opts.Logger, &opts.Metrics)
	return &Sweeper{repo: repo, opts: opts}
}

// Once settles the open payments (Settle), then cancels every order expired now, batch by batch,
// and returns how many it cancelled. Settling first pays an order whose charge succeeded before
// its window closed, instead of cancelling it and refunding the charge.
func (s *Sweeper) Once(ctx context.Context) (int, error) {
	if err := s.Settle(ctx); err != nil {
		s.opts.Logger.Warn("settling payments failed", zap.Error(err))
	}
	total := 0
	defer func() {
		if total > 0 && s.opts.OnCancel != nil {
			s.opts.OnCancel()
		}
	}()
	for {
		cancelled, err := s.repo.CancelExpired(ctx, s.opts.Now(), s.opts.Batch)
		total += len(cancelled)
		s.opts.Metrics.Expired.Add(int64(len(cancelled)))
		if err != nil || len(cancelled) < s.opts.Batch {
			return total, err
		}
	}
}

// Run sweeps every Every until ctx is done. Failures are logged and retried at the next sweep.
func (s *Sweeper) Run(ctx context.Context) error {
	t := time.NewTicker(s.opts.Every)
	defer t.Stop()
	for {
		if n, err := s.Once(ctx); err != nil && ctx.Err() == nil {
			s.opts.Logger.Warn("sweeping expired orders failed", zap.Int("cancelled", n), zap.Error(err))
		} else if n > 0 {
			s.opts.Logger.Info("expired orders cancelled", zap.Int("cancelled", n))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Settle asks the provider about every attempt without outcome older than SettleAfter, by its key,
// and records the answer (a success pays the order if it is still pending and in its window, and
// is refunded otherwise), then refunds every charge with a refund due. An attempt the provider
// answers pending, or cannot answer about, stays open and is asked again SettleAfter later.
func (s *Sweeper) Settle(ctx context.Context) error {
	if s.opts.Payments == nil {
		return nil
	}
	now := s.opts.Now()
	open, err := s.repo.OpenPayments(ctx, now.Add(-s.opts.SettleAfter), s.opts.Batch)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range open {
		if p.Status == PaymentStarted {
			res, err := s.opts.Payments.Lookup(ctx, p.Key)
			if err != nil {
				s.opts.Metrics.PaymentErrors.Add(1)
				errs = append(errs, fmt.Errorf("look up payment %s: %w", p.Key, err))
			}
			if err != nil || res.Outcome == ChargePending {
				// Still open at the provider (a buyer on its payment page, maybe for good), or no
				// answer about it: asked again SettleAfter from now, after every other open
				// attempt, so that attempts open for long never fill every batch and hold back
				// refunds and lost answers.
				if err := s.repo.TouchPayment(ctx, p.Key, s.opts.Now()); err != nil {
					errs = append(errs, err)
				}
				continue
			}
			var o Order
			if p, o, err = s.repo.SettlePayment(ctx, p.Key, res.Outcome, res.Ref, s.opts.Now()); err != nil {
				errs = append(errs, err)
				continue
			}
			s.opts.Logger.Info("payment settled", zap.String("payment", p.Key), zap.String("status", string(p.Status)),
				zap.String("order", o.ID), zap.String("order_status", string(o.Status)))
			if o.Status == StatusPaid && o.PaymentRef == p.Key && s.opts.OnCancel != nil {
				s.opts.Metrics.Paid.Add(1)
				s.opts.OnCancel() // the paid outbox row wakes the relay too
			}
		}
		if _, err := refundDue(ctx, s.repo, s.opts.Payments, p, s.opts.Now(), s.opts.Logger, s.opts.Metrics); err != nil {
			errs = append(errs, err)
			// Tried again next sweep, but after the others: refunds that keep failing must not
			// fill every batch either.
			if err := s.repo.TouchPayment(ctx, p.Key, s.opts.Now()); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
