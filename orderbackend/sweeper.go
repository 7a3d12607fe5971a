package orderbackend

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// SweeperOptions tunes a Sweeper; zero values take the defaults shown.
type SweeperOptions struct {
	Every    time.Duration // time between sweeps; 1s
	Batch    int           // orders cancelled per transaction; 100
	Now      func() time.Time
	Logger   *zap.Logger
	Metrics  *Metrics
	OnCancel func() // called after a sweep cancelled orders (wakes the relay)
}

// Sweeper cancels orders whose payment window closed. Each batch is one transaction that cancels
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
	defaultRuntime(&opts.Now, &opts.Logger, &opts.Metrics)
	return &Sweeper{repo: repo, opts: opts}
}

// Once cancels every order expired now, batch by batch, and returns how many it cancelled.
func (s *Sweeper) Once(ctx context.Context) (int, error) {
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
