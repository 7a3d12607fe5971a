// Package ratelimit limits how often one key (a client address, a user) may pass: node-local token
// buckets bounded by an LRU (Local) and an optional distributed GCRA limit in Redis (GCRA).
package ratelimit

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Rate is Events per Period with a Burst: a bucket of Burst tokens refilled at Events/Period.
type Rate struct {
	Events int
	Period time.Duration
	Burst  int
}

// Bounds that keep a Rate meaningful for both limiters: the GCRA keeps time in whole microseconds,
// so one event may not be due more often than every microsecond.
const (
	maxEvents = 1_000_000_000
	minPeriod = time.Millisecond
	maxPeriod = 24 * time.Hour
)

// ParseRate parses "<events>/<period>" with an optional " burst <n>", as written in a Caddyfile:
// "20/s burst 40", "100/m", "5/h", "10/100ms". The period is s, m, h, ms or a Go duration ("10s").
// The burst defaults to the number of events.
func ParseRate(s string) (Rate, error) {
	fields := strings.Fields(s)
	var r Rate
	switch {
	case len(fields) == 1:
	case len(fields) == 3 && strings.EqualFold(fields[1], "burst"):
		b, err := strconv.Atoi(fields[2])
		if err != nil {
			return Rate{}, fmt.Errorf("rate %q: burst %q is not a whole number", s, fields[2])
		}
		r.Burst = b
	default:
		return Rate{}, fmt.Errorf("rate %q: want <events>/<period> [burst <n>], e.g. \"20/s burst 40\"", s)
	}
	ev, per, ok := strings.Cut(fields[0], "/")
	if !ok {
		return Rate{}, fmt.Errorf("rate %q: missing '/' between events and period, e.g. \"20/s\"", s)
	}
	n, err := strconv.Atoi(ev)
	if err != nil {
		return Rate{}, fmt.Errorf("rate %q: events %q is not a whole number", s, ev)
	}
	r.Events = n
	if r.Period, err = parsePeriod(per); err != nil {
		return Rate{}, fmt.Errorf("rate %q: %w", s, err)
	}
	if r.Burst == 0 && len(fields) == 1 {
		r.Burst = r.Events
	}
	if err := r.Validate(); err != nil {
		return Rate{}, fmt.Errorf("rate %q: %w", s, err)
	}
	return r, nil
}

func parsePeriod(s string) (time.Duration, error) {
	switch s {
	case "ms":
		return time.Millisecond, nil
	case "s":
		return time.Second, nil
	case "m":
		return time.Minute, nil
	case "h":
		return time.Hour, nil
	case "":
		return 0, errors.New("missing period after '/': use s, m, h, ms or a duration like 100ms")
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("period %q: use s, m, h, ms or a duration like 100ms", s)
	}
	return d, nil
}

// Validate reports whether r can be enforced: positive events and burst, a period from 1ms to 24h,
// and at most one event per microsecond.
func (r Rate) Validate() error {
	switch {
	case r.Events <= 0 || r.Events > maxEvents:
		return fmt.Errorf("events must be between 1 and %d, got %d", maxEvents, r.Events)
	case r.Period < minPeriod || r.Period > maxPeriod:
		return fmt.Errorf("period must be between %v and %v, got %v", minPeriod, maxPeriod, r.Period)
	case r.Burst <= 0 || r.Burst > maxEvents:
		return fmt.Errorf("burst must be between 1 and %d, got %d", maxEvents, r.Burst)
	case r.Period/time.Duration(r.Events) < time.Microsecond:
		return fmt.Errorf("%d events per %v is more than one per microsecond", r.Events, r.Period)
	}
	return nil
}

// String formats r so that ParseRate reads it back: "20/s burst 40".
func (r Rate) String() string {
	return fmt.Sprintf("%d/%s burst %d", r.Events, formatPeriod(r.Period), r.Burst)
}

func formatPeriod(d time.Duration) string {
	switch d {
	case time.Millisecond:
		return "ms"
	case time.Second:
		return "s"
	case time.Minute:
		return "m"
	case time.Hour:
		return "h"
	}
	return d.String()
}

// Policy returns the RateLimit-Policy header value for r in the quota-policy form of
// draft-ietf-httpapi-ratelimit-headers ("20;w=1", with ";burst=40" when the burst differs from the
// quota). The window is in whole seconds, so a sub-second or fractional period is stated as the
// equivalent quota per second, rounded down (at least 1).
func (r Rate) Policy() string {
	quota, window := r.Events, r.Period/time.Second
	if r.Period%time.Second != 0 {
		window = 1
		quota = int(float64(r.Events) * float64(time.Second) / float64(r.Period))
		if quota < 1 {
			quota = 1
		}
	}
	p := fmt.Sprintf("%d;w=%d", quota, window)
	if r.Burst != quota {
		p += fmt.Sprintf(";burst=%d", r.Burst)
	}
	return p
}

// interval is the time one event's token takes to refill.
func (r Rate) interval() time.Duration {
	return r.Period / time.Duration(r.Events)
}

// Decision is a limiter's answer for one event.
type Decision struct {
	Allowed    bool
	Remaining  int           // events that could still pass right now
	RetryAfter time.Duration // when denied: wait this long for the next event to pass; 0 when allowed
	Reset      time.Duration // until the bucket is full again
}
