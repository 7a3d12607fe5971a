package orderbackend

import (
	"context"
	"errors"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// Backoff bounds for retrying transient failures: a database or store outage is waited out, not
// turned into lost or dead-lettered work.
const (
	minBackoff = 50 * time.Millisecond
	maxBackoff = 2 * time.Second
)

// sleep waits d or until ctx is done, reporting whether the full wait elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// nextBackoff doubles d within the bounds.
func nextBackoff(d time.Duration) time.Duration {
	return min(max(2*d, minBackoff), maxBackoff)
}

// attemptTimeout bounds one database attempt, so that a database that stopped answering (rather
// than refusing connections) is retried like one that is down.
const attemptTimeout = 30 * time.Second

// transientDB reports whether a repository error may pass by itself: the database is unavailable,
// or an attempt ran out of its own time (retry checks the caller's context first).
func transientDB(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, context.DeadlineExceeded)
}

// transientStore reports whether a store error may pass by itself: anything but a definite
// answer (unknown activity, bad input, not found) or a cancellation. A deadline is transient: a
// store that outlived its own wait (store local's localstore.ErrWaitTimeout) answered nothing, and when
// it was the caller's deadline, retry returns the caller's error.
func transientStore(err error) bool {
	return err != nil && !errors.Is(err, admission.ErrUnknownActivity) && !errors.Is(err, admission.ErrBadInput) &&
		!errors.Is(err, admission.ErrNotFound) && !errors.Is(err, context.Canceled)
}

// retry calls fn until it succeeds, fails with an error transient does not accept, or ctx is
// done (then ctx's error is returned). onRetry, if set, sees every transient failure.
func retry(ctx context.Context, transient func(error) bool, onRetry func(error), fn func() error) error {
	d := time.Duration(0)
	for {
		err := fn()
		if err == nil || !transient(err) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if onRetry != nil {
			onRetry(err)
		}
		d = nextBackoff(d)
		if !sleep(ctx, d) {
			return ctx.Err()
		}
	}
}
