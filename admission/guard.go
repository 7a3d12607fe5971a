package admission

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/caddy-seckill/caddy-seckill/internal/ticker"
)

// DefaultProbeInterval is how often a Guard re-checks the stock of activities it believes sold out.
const DefaultProbeInterval = time.Second

// GuardOptions configures a Guard. The zero value is usable.
type GuardOptions struct {
	// ProbeInterval is how often flagged activities are probed with Remaining; this bounds how long
	// a lost restock broadcast keeps a node answering sold_out. Default 1s.
	ProbeInterval time.Duration

	// Name names the circuit breakers ("<name>" and "<name>/queue"); default "admission".
	Name string
	// ConsecutiveFailures trips the breaker after this many store failures in a row. Default 5.
	ConsecutiveFailures uint32
	// FailureRatio, when positive, also trips the breaker when at least this share of the calls in
	// FailureWindow failed, once RatioMinRequests calls were counted (default 20).
	FailureRatio     float64
	RatioMinRequests uint32
	// FailureWindow is the closed-state period after which the failure counts start over.
	// Default 10s.
	FailureWindow time.Duration
	// OpenTimeout is how long the breaker stays open before letting trial calls through. Default 2s.
	OpenTimeout time.Duration
	// HalfOpenRequests is how many trial calls a half-open breaker lets through; that many
	// successes in a row close it. Default 1.
	HalfOpenRequests uint32
	// AdmitTimeout, when positive, bounds each Admit that reaches the store (queueing included): a
	// store that stalls costs a buyer this long at most, and the expired call counts as a failure
	// towards opening the breaker. A call that timed out may still have been admitted (see Store);
	// the request id makes the retry find it. Default 0: only the caller's context and the
	// client's own timeouts bound it.
	AdmitTimeout time.Duration
	// OnStateChange, if set, is called on every breaker state change, for logs and metrics. It runs
	// under the breaker's lock: it must be quick and must not call the Guard.
	OnStateChange func(name string, from, to gobreaker.State)
}

// Guard is what every node puts in front of a Store. It implements Store itself, so the edge holds
// one value:
//
//   - A node-local sold-out flag per activity: once the store answers sold out with nothing left,
//     Admit answers SoldOut without calling the store at all. The flag is cleared by the store's
//     restock broadcast, by a probe of the flagged activities every ProbeInterval (broadcasts are
//     best effort) and by Release, Define and Delete made through this Guard.
//   - A request marked MayReplay (a client-chosen idempotency key) may be a winner's retry, which
//     must get its first answer back. When the flag is set the Guard loads, in the background, the
//     request ids of the wins still held (Store.HeldRequests, bounded by the stock), and reads
//     them again at each probe while the flag stays set and keyed requests consult them; a keyed
//     request with any other id is answered SoldOut locally, and only keyed requests with a held
//     win's id, or any keyed request before the set has loaded, go to the store. The set is keyed by what the request carries, so the edge can ask RefusesReplay
//     before it knows the user. Clearing the flag drops the set.
//   - A circuit breaker around every store call that fails closed: after repeated store failures
//     every call fails fast with ErrBusy, and no admission is taken without the store. Store
//     failures are returned wrapping ErrBusy as well; business answers, ErrBadInput,
//     ErrUnknownActivity, ErrNotFound, ErrActivityRunning, ErrStockBelowSold and ErrContended
//     count as the store working (and never set the sold-out flag), and canceled calls do not count at all. Queue calls go through a second breaker with
//     the same settings, so a consumer's long blocking read never holds the edge's half-open trial
//     slot.
//
// Start runs the restock listener and the probe; Close stops them. Close does not close the
// wrapped store, which belongs to whoever created it (several Guards may share one).
type Guard struct {
	store Store
	cb    *gobreaker.CircuitBreaker[struct{}] // store calls
	qcb   *gobreaker.CircuitBreaker[struct{}] // queue calls
	probe time.Duration

	admitTimeout time.Duration // GuardOptions.AdmitTimeout
	timed        timedStore    // store, when it bounds a call by admitTimeout itself

	flagMu sync.Mutex                            // serialises writers of flags
	flags  atomic.Pointer[map[string]*guardFlag] // copied on write: the read path takes no lock

	runMu   sync.Mutex
	started bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// guardFlag is one activity's sold-out flag. Bit 0 is the flag; the higher bits count restocks
// seen. Admit only sets the flag if no restock arrived while its store call was in flight (a
// compare-and-swap against the value read before the call), so a sell-out answer that crossed a
// restock cannot leave a stale flag behind.
//
// held is the set of the held wins' request ids, loaded once per sell-out and read again by each
// probe (see guardHeld); loading is the flag state a first load is running or done for, so that
// one sell-out starts it once.
type guardFlag struct {
	state   atomic.Uint64
	held    atomic.Pointer[guardHeld]
	loading atomic.Uint64
	reads   atomic.Uint64 // numbers the held set's reads (guardHeld.seq)
	// asked is set when a keyed request consulted the held set, and cleared by the probe that
	// reads the set again: after the sale's presses stop, a flagged activity costs a probe its
	// stock reading only, not a read of every held win.
	asked atomic.Bool
}

const soldOutBit = 1

// NewGuard wraps store. Call Start to run the restock listener and the probe.
func NewGuard(store Store, opts GuardOptions) *Guard {
	name := opts.Name
	if name == "" {
		name = "admission"
	}
	g := &Guard{
		store: store,
		cb:    gobreaker.NewCircuitBreaker[struct{}](opts.breakerSettings(name)),
		qcb:   gobreaker.NewCircuitBreaker[struct{}](opts.breakerSettings(name + "/queue")),
		probe: opts.ProbeInterval,

		admitTimeout: opts.AdmitTimeout,
	}
	if g.probe <= 0 {
		g.probe = DefaultProbeInterval
	}
	g.timed, _ = store.(timedStore)
	empty := map[string]*guardFlag{}
	g.flags.Store(&empty)
	return g
}

// Start runs the restock listener and the periodic probe until ctx is done or Close is called.
// It subscribes to restocks before returning. Calling it again while running does nothing.
func (g *Guard) Start(ctx context.Context) {
	g.runMu.Lock()
	defer g.runMu.Unlock()
	if g.started {
		return
	}
	g.started = true
	ctx, g.cancel = context.WithCancel(ctx)
	// Subscribe before returning, so that no restock after Start is missed; a failed subscription
	// is retried in the background.
	ch, err := g.store.Restocks(ctx)
	if err != nil {
		ch = nil
	}
	g.wg.Add(2)
	go func() { defer g.wg.Done(); g.listen(ctx, ch) }()
	go func() { defer g.wg.Done(); g.probeLoop(ctx) }()
}

// Close stops what Start runs and waits for it. It does not close the wrapped store. The Guard
// still works afterwards, but only Release, Define and Delete through it clear its flags.
func (g *Guard) Close() error {
	g.runMu.Lock()
	defer g.runMu.Unlock()
	if g.cancel != nil {
		g.cancel()
		g.wg.Wait()
		g.cancel = nil
	}
	g.started = false
	return nil
}

// SoldOut reports whether this node believes activity is sold out. It takes no lock and makes no
// store call.
func (g *Guard) SoldOut(activity string) bool {
	f := (*g.flags.Load())[activity]
	return f != nil && f.state.Load()&soldOutBit != 0
}

// BreakerState returns the state of the breaker around store calls.
func (g *Guard) BreakerState() gobreaker.State { return g.cb.State() }

// QueueBreakerState returns the state of the breaker around queue calls.
func (g *Guard) QueueBreakerState() gobreaker.State { return g.qcb.State() }

// Store returns the wrapped store.
func (g *Guard) Store() Store { return g.store }

// flagFor returns activity's flag, creating it.
func (g *Guard) flagFor(activity string) *guardFlag {
	if f := (*g.flags.Load())[activity]; f != nil {
		return f
	}
	g.flagMu.Lock()
	defer g.flagMu.Unlock()
	old := *g.flags.Load()
	if f := old[activity]; f != nil {
		return f
	}
	f := &guardFlag{}
	next := make(map[string]*guardFlag, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[activity] = f
	g.flags.Store(&next)
	return f
}

// restocked clears activity's flag and records a restock, invalidating sell-out answers in flight,
// and drops the held set: released stock can make new wins.
// The flag is created when missing: an Admit in flight may be about to create it.
func (g *Guard) restocked(activity string) {
	f := g.flagFor(activity)
	for {
		v := f.state.Load()
		if f.state.CompareAndSwap(v, (v+2)&^soldOutBit) {
			f.held.Store(nil)
			return
		}
	}
}

// soldOut sets activity's flag unless a restock happened since before was read (before == 0 when
// no flag existed then). The call that sets it starts loading the held set.
func (g *Guard) soldOut(activity string, f *guardFlag, before uint64) {
	if f == nil {
		f = g.flagFor(activity)
	}
	if before&soldOutBit == 0 && f.state.CompareAndSwap(before, before|soldOutBit) {
		g.loadHeldInBackground(activity, f, before|soldOutBit)
	}
}

// Admit implements Store. While the activity is flagged sold out it answers SoldOut (Remaining 0)
// without a store call, unless the request may replay a win and its request id is, or may be, a
// held win's (see Guard). A sell-out is only flagged when the store says nothing is left: a buyer
// at its limit, or asking for more than remains, says nothing about the others.
func (g *Guard) Admit(ctx context.Context, r Request) (Decision, error) {
	d, _, err := g.Decide(ctx, r)
	return d, err
}

// Replay implements Store: the store's stored answer, through the breaker and within
// GuardOptions.AdmitTimeout. An activity flagged sold out whose loaded held set lacks requestID
// is ErrNotFound without a store call (RefusesReplay): no held win has that id, so there is none
// to replay, bar a win released before the sell-out, which the Guard's Admit does not replay either.
func (g *Guard) Replay(ctx context.Context, activity, user, requestID string) (Decision, error) {
	if g.RefusesReplay(activity, requestID) {
		return Decision{}, fmt.Errorf("replay %s: no held win of this request id: %w", activity, ErrNotFound)
	}
	if g.admitTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.admitTimeout)
		defer cancel()
	}
	return call(g.cb, "replay", activity, func() (Decision, error) { return g.store.Replay(ctx, activity, user, requestID) })
}

// timedStore is a Store that bounds an Admit by GuardOptions.AdmitTimeout itself, more cheaply
// than the context per call the Guard makes otherwise; an expired call's error wraps
// context.DeadlineExceeded all the same (redisstore: a pooled timer per queued call).
type timedStore interface {
	AdmitWithin(ctx context.Context, r Request, timeout time.Duration) (Decision, error)
}

// Decide is Admit that also tells who decided: flagged is true when the answer is SoldOut from
// this node's sold-out flag (or its held set), without a store call. The edge counts such a
// refusal at the flag's layer of the funnel rather than as the store's decision.
func (g *Guard) Decide(ctx context.Context, r Request) (d Decision, flagged bool, err error) {
	f := (*g.flags.Load())[r.Activity]
	var before uint64
	if f != nil {
		if before = f.state.Load(); before&soldOutBit != 0 && (!r.MayReplay || f.excludes(before, r.RequestID)) {
			return Decision{Outcome: SoldOut}, true, nil
		}
	}
	admit := func() (Decision, error) { return g.store.Admit(ctx, r) }
	switch {
	case g.admitTimeout <= 0:
	case g.timed != nil:
		admit = func() (Decision, error) { return g.timed.AdmitWithin(ctx, r, g.admitTimeout) }
	default:
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.admitTimeout)
		defer cancel()
	}
	d, err = call(g.cb, "admit", r.Activity, admit)
	if err != nil {
		return Decision{}, false, err
	}
	// A replay carries the remaining stock of its first answer, which may be stale.
	if d.Remaining == 0 && !d.Replayed && !d.RemainingPartial && (d.Outcome == SoldOut || d.Outcome == Won) {
		g.soldOut(r.Activity, f, before)
	}
	return d, false, nil
}

// listen clears flags on the restock broadcasts of ch, subscribing again whenever the
// subscription ends or fails (ch is nil when the first attempt failed), until ctx is done.
// Broadcasts missed in between are the probe's job, and a new subscription runs one at once.
func (g *Guard) listen(ctx context.Context, ch <-chan string) {
	for {
		g.drain(ctx, ch)
		select {
		case <-ctx.Done():
			return
		case <-time.After(g.probe):
		}
		var err error
		if ch, err = g.store.Restocks(ctx); err != nil {
			ch = nil
			continue
		}
		g.probeFlagged(ctx)
	}
}

// drain clears flags for the activities read from ch until ch is closed or ctx is done.
func (g *Guard) drain(ctx context.Context, ch <-chan string) {
	if ch == nil {
		return
	}
	for {
		select {
		case id, ok := <-ch:
			if !ok {
				return
			}
			g.restocked(id)
		case <-ctx.Done():
			return
		}
	}
}

// probeLoop probes the flagged activities every probe interval until ctx is done.
func (g *Guard) probeLoop(ctx context.Context) {
	ticker.Every(ctx, g.probe, func() { g.probeFlagged(ctx) })
}

// probeFlagged asks the store for the stock of every flagged activity and clears the flags of
// those with stock again, or that no longer exist. Failures leave the flag set: the breaker
// decides what a failing store means. A still sold-out activity whose held set was consulted since
// the last probe (or failed to load) has it read again: a release and a new win elsewhere whose
// broadcast this node lost leave nothing left, so the flag rightly stays, but the new win is in no
// set read before it. A set nobody asks is left as it is until a keyed request asks again.
func (g *Guard) probeFlagged(ctx context.Context) {
	for id, f := range *g.flags.Load() {
		v := f.state.Load()
		if v&soldOutBit == 0 {
			continue
		}
		n, err := g.Remaining(ctx, id)
		if ctx.Err() != nil {
			return
		}
		switch {
		case n > 0 || isUnknownActivity(err):
			g.restocked(id)
		case err == nil && (f.asked.Swap(false) || !f.heldLoaded(v)):
			lctx, cancel := context.WithTimeout(ctx, heldLoadTimeout)
			g.loadHeld(lctx, id, f, v, true)
			cancel()
		}
	}
}

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

// heldLoadTimeout bounds each load of a sold-out activity's held set, the first one in the
// background and the probe's: they run outside any request, so nothing else would.
const heldLoadTimeout = 5 * time.Second

// guardHeld is the immutable set of the request ids of an activity's held wins (wins not
// released), read when its flag was set and again at every probe while it stays set. gen is the
// flag state it was read under; it answers only while the flag still has that state, so a set that
// a restock made stale is never consulted, even before it is dropped. seq orders the reads of one
// gen: a set read later replaces one read earlier, never the reverse.
//
// Why a keyed request whose id is not in the set can only be sold out: once remaining is 0, every
// item is held by a win (a win takes stock and records its request id in one atomic step), and
// nobody can win again until stock is released, which clears the flag (restock broadcast, probe,
// or a Release through this Guard) and with it this set. A request whose id is no held win's has
// no held win to replay: the store could only answer sold_out, or limit_reached to a holder
// retrying with a new key, whom the set answers sold_out (no item either way). A retry of a win
// released before the sell-out is answered sold_out too, where the store would replay the
// reservation given back. Ids are scoped to the user, so a held id lets any user's request
// through to the store, which decides: a store call spent, never a wrong answer. Like the flag
// itself, the set is as fresh as the restock broadcast and the probe make it: a lost broadcast
// of a release followed by a new win leaves the stock at 0, so only the probe's fresh read of the
// set lets that win's retry through, at most a probe interval after the first keyed request that
// consulted the stale set.
type guardHeld struct {
	gen      uint64
	seq      uint64
	requests map[string]struct{}
}

// excludes reports whether a loaded held set for the flag state gen shows that no held win has
// request id requestID. Without a set for gen it says false: the caller must ask the store.
func (f *guardFlag) excludes(gen uint64, requestID string) bool {
	h := f.held.Load()
	if h == nil || h.gen != gen {
		return false
	}
	if !f.asked.Load() { // a load first: most presses find it set, and write nothing
		f.asked.Store(true)
	}
	_, ok := h.requests[requestID]
	return !ok
}

// heldLoaded reports whether the set for the flag state gen is in place.
func (f *guardFlag) heldLoaded(gen uint64) bool {
	h := f.held.Load()
	return h != nil && h.gen == gen
}

// loadHeld reads activity's held request ids for the flag state gen and publishes them, unless
// the flag changed meanwhile, a set of gen read later is already in place, or (without again) a
// load for gen is already running. again is the probe's read of a set that may be in place. A
// failed load leaves the set as it was (none, at first, so keyed requests keep going to the
// store); the probe tries again.
func (g *Guard) loadHeld(ctx context.Context, activity string, f *guardFlag, gen uint64, again bool) {
	if f.loading.Swap(gen) == gen && !again {
		return
	}
	seq := f.reads.Add(1) // before the read: a later seq saw at least what this read sees
	ids, err := g.HeldRequests(ctx, activity)
	if err != nil {
		f.loading.CompareAndSwap(gen, 0)
		return
	}
	set := make(map[string]struct{}, len(ids))
	for _, id := range ids {
		set[id] = struct{}{}
	}
	h := &guardHeld{gen: gen, seq: seq, requests: set}
	for {
		old := f.held.Load()
		if f.state.Load() != gen || (old != nil && (old.gen > gen || old.gen == gen && old.seq >= seq)) {
			return
		}
		if f.held.CompareAndSwap(old, h) {
			break
		}
	}
	// A restock between the check and the swap dropped the set before we published ours: drop
	// it again so it does not outlive its generation in memory (gen already keeps it unused).
	if f.state.Load() != gen {
		f.held.CompareAndSwap(h, nil)
	}
}

// loadHeldInBackground starts loadHeld off the request's path.
func (g *Guard) loadHeldInBackground(activity string, f *guardFlag, gen uint64) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), heldLoadTimeout)
		defer cancel()
		g.loadHeld(ctx, activity, f, gen, false)
	}()
}

// HeldLoaded reports whether the guard has loaded the held request ids of activity's current
// sell-out, after which a flagged activity's keyed refusals no longer ask the store.
func (g *Guard) HeldLoaded(activity string) bool {
	f := (*g.flags.Load())[activity]
	if f == nil {
		return false
	}
	v := f.state.Load()
	return v&soldOutBit != 0 && f.heldLoaded(v)
}

// RefusesReplay reports whether a keyed request for activity with request id key is answered
// SoldOut by this node's flag without a store call: the activity is flagged sold out and the
// loaded set of held request ids lacks key. False while the set is loading or failed to load.
// It takes no lock and allocates nothing, for the edge's hot path.
func (g *Guard) RefusesReplay(activity, key string) bool {
	f := (*g.flags.Load())[activity]
	if f == nil {
		return false
	}
	v := f.state.Load()
	return v&soldOutBit != 0 && f.excludes(v, key)
}

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

// HeldRequests implements Store.
func (g *Guard) HeldRequests(ctx context.Context, activity string) ([]string, error) {
	return call(g.cb, "held requests", activity, func() ([]string, error) { return g.store.HeldRequests(ctx, activity) })
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
