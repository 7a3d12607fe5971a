package admission

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sony/gobreaker/v2"
)

// Breaker defaults, chosen for a store that answers in about a millisecond: five failures in a row
// mean it is down, not slow, and two seconds is long enough for a Redis failover to start.
const (
	DefaultConsecutiveFailures = 5
	DefaultOpenTimeout         = 2 * time.Second
	DefaultHalfOpenRequests    = 1
	DefaultFailureWindow       = 10 * time.Second
	DefaultRatioMinRequests    = 20
)

// breakerSettings turns the options into gobreaker settings for the breaker called name.
func (o GuardOptions) breakerSettings(name string) gobreaker.Settings {
	failures := o.ConsecutiveFailures
	if failures == 0 {
		failures = DefaultConsecutiveFailures
	}
	minRequests := o.RatioMinRequests
	if minRequests == 0 {
		minRequests = DefaultRatioMinRequests
	}
	ratio := o.FailureRatio
	st := gobreaker.Settings{
		Name:        name,
		MaxRequests: o.HalfOpenRequests,
		Interval:    o.FailureWindow,
		Timeout:     o.OpenTimeout,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			if c.ConsecutiveFailures >= failures {
				return true
			}
			counted := c.Requests - c.TotalExclusions
			return ratio > 0 && counted >= minRequests && float64(c.TotalFailures) >= ratio*float64(counted)
		},
		IsSuccessful: storeAnswered,
		IsExcluded:   callerGaveUp,
	}
	if st.MaxRequests == 0 {
		st.MaxRequests = DefaultHalfOpenRequests
	}
	if st.Interval == 0 {
		st.Interval = DefaultFailureWindow
	}
	if st.Timeout == 0 {
		st.Timeout = DefaultOpenTimeout
	}
	if hook := o.OnStateChange; hook != nil {
		st.OnStateChange = func(name string, from, to gobreaker.State) { hook(name, from, to) }
	}
	return st
}

// storeAnswered reports whether err is the store's considered answer rather than its failure: a
// business refusal proves the store is healthy. (Rejections such as SoldOut are decisions, not
// errors, and never reach here as failures.)
func storeAnswered(err error) bool {
	return err == nil ||
		errors.Is(err, ErrBadInput) ||
		errors.Is(err, ErrUnknownActivity) ||
		errors.Is(err, ErrNotFound) ||
		errors.Is(err, ErrActivityRunning) ||
		errors.Is(err, ErrStockBelowSold) ||
		errors.Is(err, ErrContended)
}

// callerGaveUp reports a call abandoned by its caller. It says nothing about the store, so it is
// neither a success nor a failure: counted as a success, a burst of disconnecting clients could
// close a half-open breaker on a store that never answered. A deadline that expired is a failure:
// the store was too slow.
func callerGaveUp(err error) bool {
	return errors.Is(err, context.Canceled)
}

// BreakerRefused reports whether the guard's breaker refused a call without trying the store
// (open, or half-open with its trial already taken).
func BreakerRefused(err error) bool {
	return errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests)
}

// busyError maps a failed call to the error the caller sees. A call the breaker refused, and a
// store failure, both wrap ErrBusy, so the edge answers 503 busy for either; store answers
// (ErrBadInput, ErrNotFound, ...) and cancellations pass through unchanged.
func busyError(op, activity string, err error) error {
	switch {
	case BreakerRefused(err):
		return fmt.Errorf("%s %s: %w: %w", op, activity, ErrBusy, err)
	case storeAnswered(err), callerGaveUp(err):
		return err
	}
	return fmt.Errorf("%w: %w", ErrBusy, err)
}

// call runs fn through cb and maps its error with busyError. The operation's name comes in two
// parts so that a successful call does not pay for building it.
func call[T any](cb *gobreaker.CircuitBreaker[struct{}], op, activity string, fn func() (T, error)) (T, error) {
	var v T
	_, err := cb.Execute(func() (struct{}, error) {
		var err error
		v, err = fn()
		return struct{}{}, err
	})
	if err != nil {
		return v, busyError(op, activity, err)
	}
	return v, nil
}
