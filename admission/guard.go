package admission

import (
	"context"
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
//     must get its first answer back. When the flag is set the Guard loads, once and in the
//     background, the users holding items (Store.Holders, bounded by the stock); a keyed request
//     from anyone else is answered SoldOut locally, and only holders' keyed requests, or any keyed
//     request before the set has loaded, go to the store. Clearing the flag drops the set.
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
// holders is the set of users holding items, loaded once per sell-out (see guardHolders);
// loading is the flag state a load is running or done for, so that one sell-out loads it once.
type guardFlag struct {
	state   atomic.Uint64
	holders atomic.Pointer[guardHolders]
	loading atomic.Uint64
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
// and drops the holders set: released stock can make new holders.
// The flag is created when missing: an Admit in flight may be about to create it.
func (g *Guard) restocked(activity string) {
	f := g.flagFor(activity)
	for {
		v := f.state.Load()
		if f.state.CompareAndSwap(v, (v+2)&^soldOutBit) {
			f.holders.Store(nil)
			return
		}
	}
}

// soldOut sets activity's flag unless a restock happened since before was read (before == 0 when
// no flag existed then). The call that sets it starts loading the holders.
func (g *Guard) soldOut(activity string, f *guardFlag, before uint64) {
	if f == nil {
		f = g.flagFor(activity)
	}
	if before&soldOutBit == 0 && f.state.CompareAndSwap(before, before|soldOutBit) {
		g.loadHoldersInBackground(activity, f, before|soldOutBit)
	}
}

// Admit implements Store. While the activity is flagged sold out it answers SoldOut (Remaining 0)
// without a store call, unless the request may replay a win and its user is, or may be, a holder
// (see Guard). A sell-out is only flagged when the store says nothing is left: a buyer at its
// limit, or asking for more than remains, says nothing about the others.
func (g *Guard) Admit(ctx context.Context, r Request) (Decision, error) {
	d, _, err := g.Decide(ctx, r)
	return d, err
}

// Decide is Admit that also tells who decided: flagged is true when the answer is SoldOut from
// this node's sold-out flag (or its holders set), without a store call. The edge counts such a
// refusal at the flag's layer of the funnel rather than as the store's decision.
func (g *Guard) Decide(ctx context.Context, r Request) (d Decision, flagged bool, err error) {
	f := (*g.flags.Load())[r.Activity]
	var before uint64
	if f != nil {
		if before = f.state.Load(); before&soldOutBit != 0 && (!r.MayReplay || f.excludes(before, r.User)) {
			return Decision{Outcome: SoldOut}, true, nil
		}
	}
	if g.admitTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.admitTimeout)
		defer cancel()
	}
	d, err = call(g.cb, "admit", r.Activity, func() (Decision, error) { return g.store.Admit(ctx, r) })
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
// decides what a failing store means. A still sold-out activity whose holders failed to load is
// loaded again.
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
		case err == nil && !f.holdersLoaded(v):
			g.loadHolders(ctx, id, f, v)
		}
	}
}
