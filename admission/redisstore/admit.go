package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// Admit takes one admission decision (see Store.Admit and lua/admit.lua). Concurrent calls for
// one activity share script calls (group admission, admitGroups below) unless
// Options.AdmitBatch is 1.
func (s *Store) Admit(ctx context.Context, r admission.Request) (admission.Decision, error) {
	return s.admitBy(ctx, r, time.Time{})
}

// AdmitWithin is Admit bounded by timeout, queueing included, for admission.Guard's AdmitTimeout:
// an expired call ends with an error wrapping context.DeadlineExceeded, as under a context with
// that deadline.
func (s *Store) AdmitWithin(ctx context.Context, r admission.Request, timeout time.Duration) (admission.Decision, error) {
	return s.admitBy(ctx, r, time.Now().Add(timeout))
}

// admitBy is Admit bounded by deadline unless it is zero. A call on an unsplit activity, the hot
// path of a sale, grouped or not, waits with its call's pooled timer: a context per call (its
// timer, and its link into the request's context) is a hot-path cost (docs/admission.md), and
// the client's read does not end with a context's deadline anyway (ContextTimeoutEnabled is
// off). A split activity's call gets that context.
func (s *Store) admitBy(ctx context.Context, r admission.Request, deadline time.Time) (admission.Decision, error) {
	if err := r.Validate(); err != nil {
		return admission.Decision{}, fmt.Errorf("admit: %w", err)
	}
	return bucketRetry(ctx, s, r.Activity, func(n int) (admission.Decision, error) {
		if n == 1 {
			var wait time.Duration // none
			if !deadline.IsZero() {
				if wait = time.Until(deadline); wait <= 0 {
					return admission.Decision{}, fmt.Errorf("admit %s: %w", r.Activity, context.DeadlineExceeded)
				}
			}
			return s.admitOn(ctx, r, wait)
		}
		if !deadline.IsZero() {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, deadline)
			defer cancel()
		}
		return s.admitBuckets(ctx, r, n)
	})
}

// admitOn takes the decision on the key set of r.Activity (an activity or one bucket of one)
// and waits for it until ctx ends or, when positive, timeout passes.
func (s *Store) admitOn(ctx context.Context, r admission.Request, timeout time.Duration) (admission.Decision, error) {
	if s.groups != nil {
		return s.groups.admit(ctx, r, timeout)
	}
	// A batch of one: the same script, reply parsing and errors as a group, sent from a
	// goroutine of its own, as a group's pipeline is, so that the caller can stop waiting.
	c := s.calls.get(r)
	expired := c.arm(timeout)
	if c.runAlone == nil {
		c.runAlone = func() {
			calls := [1]*admitCall{c}
			s.runAdmitBatches(c.ctx, []admitBatch{{activity: c.req.Activity, calls: calls[:]}})
		}
	}
	c.ctx = ctx
	go c.runAlone()
	if cause := c.await(ctx, expired); cause != nil && !c.answered() {
		// Sent: the pipeline will still write into c, so c is left to the collector.
		return admission.Decision{}, fmt.Errorf("admit %s: %w", r.Activity, cause)
	}
	a := s.calls.recycle(c)
	return a.d, a.err
}

// admitKeys returns admit.lua's KEYS for activity.
func (s *Store) admitKeys(activity string) []string {
	return []string{s.key(activity, "meta"), s.key(activity, "stock"), s.key(activity, "users"), s.key(activity, "orders")}
}

// redisParseDecision reads one of admit.lua's {outcome, remaining, reservation_id, replayed},
// read as strings (runAdmitBatches), for a request of qty items; outcome 0 (qty above the limit)
// is returned as Outcome 0 for the caller to turn into an error. A fresh win's Qty is qty; a
// replay's is replayed, the qty of the win it replays.
func redisParseDecision(v []string, qty int64) (admission.Decision, error) {
	if len(v) != 4 {
		return admission.Decision{}, fmt.Errorf("malformed admit reply: %d elements", len(v))
	}
	var code int64 = -1
	if len(v[0]) == 1 { // 0 to 5
		code = int64(v[0][0]) - '0'
	}
	left, err := strconv.ParseInt(v[1], 10, 64)
	if err != nil || code < 0 || code > int64(admission.Ended) {
		return admission.Decision{}, fmt.Errorf("malformed admit reply %q", v)
	}
	d := admission.Decision{Outcome: admission.Outcome(code), ReservationID: v[2], Remaining: left}
	if v[3] != "0" {
		won, err := strconv.ParseInt(v[3], 10, 64)
		if err != nil || won < 1 || d.Outcome != admission.Won {
			return admission.Decision{}, fmt.Errorf("malformed admit reply %q", v)
		}
		d.Replayed, d.Qty = true, won
	} else if d.Outcome == admission.Won {
		d.Qty = qty
	}
	return d, nil
}

// Release gives a reservation back exactly once (see Store.Release and lua/release.lua). Each call
// carries a random token, so that when the client retries the script after a dropped connection
// the retry of the releasing call still reports true.
func (s *Store) Release(ctx context.Context, activity, reservationID string) (bool, error) {
	if !admission.ValidActivityID(activity) {
		return false, fmt.Errorf("release: %w", admission.BadInput("activity id %q", activity))
	}
	if err := redisCheckName("reservation id", reservationID, admission.MaxRequestIDLen); err != nil {
		return false, fmt.Errorf("release %s: %w", activity, err)
	}
	return bucketRetry(ctx, s, activity, func(n int) (bool, error) {
		if n > 1 {
			return s.releaseBuckets(ctx, activity, reservationID, n)
		}
		return s.releaseOn(ctx, activity, activity, reservationID)
	})
}

// releaseOn releases on the key set of on (activity, or one of its buckets); activity is
// announced on the restock channel.
func (s *Store) releaseOn(ctx context.Context, activity, on, reservationID string) (bool, error) {
	keys := []string{
		s.key(on, "meta"), s.key(on, "stock"), s.key(on, "users"),
		s.key(on, "released"), s.key(on, "orders"),
	}
	if s.ack != nil {
		return s.releaseAcked(ctx, activity, reservationID, keys)
	}
	n, err := s.release.Run(ctx, s.hot, keys, reservationID, admission.NewSalt(), s.channel, activity).Int64()
	if err != nil {
		return false, fmt.Errorf("release %s %s: %w", activity, reservationID, redisScriptErr(err))
	}
	return n == 1, nil
}

// releaseAcked is Release with Options.ReplicasAck: a release the replicas do not confirm
// answers a *ReplicationError, so that the caller (the order backend's relay) tries again. A
// repeated release answers false but writes its token again (release.lua), so its WAIT covers the
// first release, and only a confirmed one ends the retries.
func (s *Store) releaseAcked(ctx context.Context, activity, reservationID string, keys []string) (bool, error) {
	cmd, acked, waitErr := s.evalAcked(ctx, s.release, luaRelease, keys, reservationID, admission.NewSalt(), s.channel, activity)
	n, err := cmd.Int64()
	if err == nil {
		err = waitErr
	}
	if err != nil {
		return false, fmt.Errorf("release %s %s: %w", activity, reservationID, redisScriptErr(err))
	}
	if acked < s.ack.n {
		return false, &admission.ReplicationError{
			Op: "release", Activity: activity, Wanted: s.ack.n, Acked: acked, ReservationID: reservationID,
		}
	}
	return n == 1, nil
}

// Group admission. A flash sale sends thousands of concurrent buys to one activity, and every one
// of them is one script call on the single Redis shard that holds the activity. Most of a call's
// cost there is not the decision but its frame: the system calls of the round trip, the script
// call itself, reading the definition, the clock and the stock. So concurrent Admit calls for one
// activity are grouped: while a script call for the activity is in flight, newcomers queue, and the
// next call carries all of them (up to the batch size). admit.lua decides them one after the
// other, each exactly as if it ran alone, inside one atomic script. This is the hot-row "merged
// deduction" of large flash sales, done with no timer: with one caller nothing waits, and the
// batch grows only as much as the server is busy.
//
// The script calls themselves travel in pipelines: one sender takes the next batch of every
// activity with waiting calls and sends them all in one round trip, so a sale of many activities
// pays the client's round trip (a pooled connection, its write and read system calls, the
// goroutine woken by the reply) once per pipeline instead of once per activity.

const (
	// defaultAdmitBatch is the most requests one script call carries. At about 10 µs per decision
	// inside the script, 64 keep a call near 1 ms, so other clients of the server are not held up.
	defaultAdmitBatch = 64
	// defaultAdmitInFlight is how many pipelines of script calls may be in flight at once: two
	// keep the server busy while one reply travels back and the next pipeline is sent.
	defaultAdmitInFlight = 2
)

// MaxAdmitBatch bounds Options.AdmitBatch. 1024 decisions hold the Redis server for about
// 10 ms, longer than any other client of it should wait; and the scripts unpack a call's
// requests into one command's arguments, which Lua bounds at 8,000 values.
const MaxAdmitBatch = 1024

// admitCall is one Admit waiting for its decision. Calls are reused (admitGroups.calls): a call
// goes back only once its caller has read its answer, or withdrawn it unsent, so no batch still
// holds a call that is handed out again.
type admitCall struct {
	req    admission.Request
	answer admitAnswer   // written by the batch before it signals done
	done   chan struct{} // buffered: the batch never blocks on a caller that has gone
	timer  *time.Timer   // AdmitWithin's bound, kept with the call for the next one; stopped when idle

	// runAlone sends an ungrouped call (AdmitBatch 1) on ctx, its caller's context. It is made
	// once per pooled call: a go statement with arguments would allocate them on every call.
	runAlone func()
	ctx      context.Context
}

// arm starts c's timer for d and returns its channel; without a bound (d <= 0) it returns nil,
// a channel never ready.
func (c *admitCall) arm(d time.Duration) <-chan time.Time {
	if d <= 0 {
		return nil
	}
	if c.timer == nil {
		c.timer = time.NewTimer(d)
	} else {
		c.timer.Reset(d) // stopped: Reset leaves no earlier expiry in the channel
	}
	return c.timer.C
}

// disarm stops c's timer, if armed, before c goes back to the pool.
func (c *admitCall) disarm() {
	if c.timer != nil {
		c.timer.Stop()
	}
}

// await waits for c's answer, for ctx, or for expired (nil: never), and stops c's timer. It
// returns nil once c is answered, else why it stopped waiting.
func (c *admitCall) await(ctx context.Context, expired <-chan time.Time) error {
	defer c.disarm()
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-expired:
		return context.DeadlineExceeded // what a context with this deadline would have said
	}
}

// answered reports whether c's answer has arrived after await gave up on it: it may have come
// at the same moment, and is then preferred.
func (c *admitCall) answered() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// answerWith gives c its answer and wakes its caller; the channel orders the write before the
// caller's read.
func (c *admitCall) answerWith(d admission.Decision, err error) {
	c.answer = admitAnswer{d: d, err: err}
	c.done <- struct{}{}
}

// admitCallPool holds answered calls for reuse, so that an Admit does not allocate a call and
// its channel each time.
type admitCallPool struct{ p sync.Pool }

// get returns an unused call for r.
func (cp *admitCallPool) get(r admission.Request) *admitCall {
	c, _ := cp.p.Get().(*admitCall)
	if c == nil {
		c = &admitCall{done: make(chan struct{}, 1)}
	}
	c.req = r
	return c
}

// recycle returns the answer of c, whose channel has been read or which was never sent, and puts
// c back for another Admit.
func (cp *admitCallPool) recycle(c *admitCall) admitAnswer {
	a := c.answer
	c.req, c.answer, c.ctx = admission.Request{}, admitAnswer{}, nil // hold no user's strings while pooled
	cp.p.Put(c)
	return a
}

type admitAnswer struct {
	d   admission.Decision
	err error
}

// admitBatch is one script call: calls, all for activity.
type admitBatch struct {
	activity string
	calls    []*admitCall
}

// admitQueue holds one activity's waiting calls.
type admitQueue struct {
	activity string
	pending  []*admitCall
	inFlight int  // the activity's batches in flight (at most one per pipeline)
	listed   bool // in admitGroups.waiting
}

// admitGroups queues Admit calls per activity and sends them in pipelines of batches, one batch
// per activity in each.
type admitGroups struct {
	batch, inFlight int
	run             func(ctx context.Context, batches []admitBatch)

	mu     sync.Mutex
	queues map[string]*admitQueue // only activities with waiting or running calls
	// waiting lists the queues with calls that no pipeline has taken yet, in the order they
	// began to wait; the next pipeline takes a batch from each.
	waiting []*admitQueue
	sending int // pipelines in flight, each run by one sender goroutine (send)
	// spare holds the batch arrays of senders that stopped, for the next sender, so that
	// starting one does not allocate them; at most inFlight are kept.
	spare [][]admitBatch
	// idle holds emptied queues for the next activity that begins to wait; at most inFlight.
	idle []*admitQueue

	calls *admitCallPool
}

func newAdmitGroups(batch, inFlight int, calls *admitCallPool, run func(context.Context, []admitBatch)) *admitGroups {
	return &admitGroups{batch: batch, inFlight: inFlight, run: run, calls: calls, queues: map[string]*admitQueue{}}
}

// drop deletes the queue of activity, empty and with nothing in flight, keeping it for reuse.
// g.mu must be held.
func (g *admitGroups) drop(q *admitQueue) {
	delete(g.queues, q.activity)
	if len(g.idle) < g.inFlight && cap(q.pending) <= g.batch {
		*q = admitQueue{pending: q.pending[:0]}
		g.idle = append(g.idle, q)
	}
}

// admit queues r and waits for its decision, for ctx, or for timeout when it is positive. A call
// still queued when ctx ends or timeout passes is withdrawn and nothing is sent for it; a call
// already sent may still be decided (a win the caller does not hear of, exactly as when a single
// call's context ends after it was sent).
func (g *admitGroups) admit(ctx context.Context, r admission.Request, timeout time.Duration) (admission.Decision, error) {
	c := g.calls.get(r)
	expired := c.arm(timeout)
	g.mu.Lock()
	q := g.queues[r.Activity]
	if q == nil {
		if n := len(g.idle); n > 0 {
			q, g.idle[n-1] = g.idle[n-1], nil
			g.idle = g.idle[:n-1]
		} else {
			q = &admitQueue{}
		}
		q.activity = r.Activity
		g.queues[r.Activity] = q
	}
	q.pending = append(q.pending, c)
	if !q.listed {
		q.listed = true
		g.waiting = append(g.waiting, q)
	}
	var first []admitBatch
	if g.sending < g.inFlight {
		g.sending++
		var buf []admitBatch
		if n := len(g.spare); n > 0 {
			buf, g.spare[n-1] = g.spare[n-1], nil
			g.spare = g.spare[:n-1]
		}
		first = g.take(buf)
	}
	g.mu.Unlock()
	if first != nil {
		// The pipeline must not end with this caller's context: it carries other callers too.
		go g.send(context.WithoutCancel(ctx), first)
	}

	cause := c.await(ctx, expired)
	if cause == nil {
		a := g.calls.recycle(c)
		return a.d, a.err
	}
	g.mu.Lock()
	withdrawn := g.withdraw(r.Activity, c)
	g.mu.Unlock()
	switch {
	case withdrawn:
		g.calls.recycle(c)
	case c.answered():
		a := g.calls.recycle(c)
		return a.d, a.err
	}
	// Else sent and unanswered: the batch will still write into c, so c is left to the collector.
	return admission.Decision{}, fmt.Errorf("admit %s: %w", r.Activity, cause)
}

// send runs pipelines until no call waits; it holds one of the g.inFlight places.
func (g *admitGroups) send(ctx context.Context, batches []admitBatch) {
	for batches != nil {
		g.run(ctx, batches)
		g.mu.Lock()
		for _, b := range batches {
			q := g.queues[b.activity]
			q.inFlight--
			if q.inFlight == 0 && len(q.pending) == 0 && !q.listed {
				g.drop(q)
			}
		}
		next := g.take(batches) // run is done with the batches: the next ones reuse them
		if next == nil {
			g.sending--
			if len(g.spare) < g.inFlight {
				for i := range batches {
					clear(batches[i].calls) // hold no answered call
				}
				g.spare = append(g.spare, batches[:0])
			}
		}
		batches = next
		g.mu.Unlock()
	}
}

// take removes the next batch of every waiting activity into buf's arrays (new ones where buf
// has none or too small ones), or returns nil when nothing waits. g.mu must be held.
func (g *admitGroups) take(buf []admitBatch) []admitBatch {
	batches := buf[:0]
	keep := 0
	for _, q := range g.waiting {
		n := min(len(q.pending), g.batch)
		if n == 0 { // its calls were withdrawn
			q.listed = false
			if q.inFlight == 0 {
				g.drop(q)
			}
			continue
		}
		var calls []*admitCall
		if i := len(batches); i < cap(batches) {
			calls = batches[:i+1][i].calls[:0]
		}
		calls = append(calls, q.pending[:n]...)
		rest := copy(q.pending, q.pending[n:])
		clear(q.pending[rest:])
		q.pending = q.pending[:rest]
		if rest == 0 && cap(q.pending) > g.batch {
			q.pending = nil // a burst's long array is not kept for a quiet time
		}
		q.inFlight++
		batches = append(batches, admitBatch{activity: q.activity, calls: calls})
		if rest > 0 {
			g.waiting[keep] = q
			keep++
		} else {
			q.listed = false
		}
	}
	clear(g.waiting[keep:])
	g.waiting = g.waiting[:keep]
	if len(batches) == 0 {
		return nil
	}
	return batches
}

// withdraw removes c from its activity's queue if it has not been sent. g.mu must be held.
func (g *admitGroups) withdraw(activity string, c *admitCall) bool {
	q := g.queues[activity]
	if q == nil {
		return false
	}
	for i, p := range q.pending {
		if p == c {
			q.pending = slices.Delete(q.pending, i, i+1)
			return true
		}
	}
	return false
}

// runAdmitBatches is the Store's admitGroups.run: one pipeline of admit.lua calls, one per batch,
// whose requests are already validated. Every call gets its answer (or the error of its batch).
func (s *Store) runAdmitBatches(ctx context.Context, batches []admitBatch) {
	sc, _ := s.admitScratch.Get().(*admitScratch)
	if sc == nil {
		sc = &admitScratch{}
	}
	defer s.putScratch(sc)
	cmds, keys, acked, waitErrs := sc.reset(len(batches))
	for i, b := range batches {
		keys[i] = s.hotKeys(b.activity)
		sc.args[i] = admitArgs(sc.args[i], keys[i].admitSha, b.calls)
		cmds[i] = admitCmd(ctx, sc.args[i])
	}
	s.sendAdmits(ctx, keys, cmds, acked, waitErrs)
	// The server lost its script cache (a restart, SCRIPT FLUSH): the calls it refused go again
	// with the source, which also loads it again, as redis.Script.Run does.
	var again []int
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if again != nil {
		cmds2 := make([]redis.Cmder, len(again))
		keys2 := make([]*redisHotKeys, len(again))
		for j, i := range again {
			keys2[j] = keys[i]
			cmds2[j] = admitCmd(ctx, admitArgs(nil, keys[i].admitEval, batches[i].calls))
		}
		acked2, waitErrs2 := make([]int64, len(again)), make([]error, len(again))
		s.sendAdmits(ctx, keys2, cmds2, acked2, waitErrs2)
		for j, i := range again {
			cmds[i], acked[i], waitErrs[i] = cmds2[j], acked2[j], waitErrs2[j]
		}
	}
	for i, b := range batches {
		reply, err := cmds[i].(*redis.StringSliceCmd).Result()
		if err == nil && len(reply) != 4*len(b.calls) {
			err = fmt.Errorf("malformed admit reply: %d elements for %d requests", len(reply), len(b.calls))
		}
		if err == nil {
			// The script ran but its WAIT failed: whether its wins will survive a failover is
			// unknown, as after a timeout.
			err = waitErrs[i]
		}
		if err != nil {
			err = fmt.Errorf("admit %s: %w", b.activity, redisScriptErr(err))
			for _, c := range b.calls {
				c.answerWith(admission.Decision{}, err)
			}
			continue
		}
		for j, c := range b.calls {
			d, err := admitDecision(reply, j, b.activity, c.req.Qty)
			if err == nil {
				d, err = s.checkAcked(b.activity, d, acked[i])
			}
			c.answerWith(d, err) // c may be reused from here on
		}
	}
}

// admitScratch holds the per-pipeline arrays of runAdmitBatches for the next pipeline
// (Store.admitScratch), so that a pipeline allocates only its commands.
type admitScratch struct {
	cmds  []redis.Cmder
	keys  []*redisHotKeys
	acked []int64
	errs  []error
	args  [][]any // each command's arguments (admitArgs)
}

// reset returns the arrays for n batches, zeroed.
func (sc *admitScratch) reset(n int) ([]redis.Cmder, []*redisHotKeys, []int64, []error) {
	if cap(sc.cmds) < n {
		sc.cmds, sc.keys = make([]redis.Cmder, n), make([]*redisHotKeys, n)
		sc.acked, sc.errs = make([]int64, n), make([]error, n)
		sc.args = append(sc.args, make([][]any, n-len(sc.args))...)
	}
	return sc.cmds[:n], sc.keys[:n], sc.acked[:n], sc.errs[:n]
}

// putScratch zeroes sc, so that it keeps nothing of the pipeline (its commands hold the calls'
// strings), and puts it back for the next pipeline.
func (s *Store) putScratch(sc *admitScratch) {
	clear(sc.cmds)
	clear(sc.keys)
	clear(sc.acked)
	clear(sc.errs)
	for i, a := range sc.args {
		clear(a)
		sc.args[i] = a[:0]
	}
	s.admitScratch.Put(sc)
}

// admitArgs appends to buf[:0] the arguments of one admit.lua call for calls from start
// (admitSha or admitEval). The command is built by hand rather than through redis.Script, to
// keep the client's share of a call small (how, and what it saved: docs/admission.md, "Group
// admission"): users and request ids go in as pointers into the calls, which are not modified
// while go-redis holds them.
func admitArgs(buf, start []any, calls []*admitCall) []any {
	args := append(buf[:0], start...)
	for _, c := range calls {
		args = append(args, &c.req.User, c.req.Qty, &c.req.RequestID)
	}
	return args
}

// admitCmd returns the admit.lua call with args (admitArgs).
func admitCmd(ctx context.Context, args []any) *redis.StringSliceCmd {
	cmd := redis.NewStringSliceCmd(ctx, args...)
	cmd.SetFirstKeyPos(3)
	return cmd
}

// sendAdmits sends cmds, admit.lua calls on the keys of keys[i], in one pipeline of the client
// (a Cluster client splits it by node and follows redirections), or with their WAIT when the
// store waits for replicas: then it sets acked[i] to how many replicas acknowledged cmds[i] and
// errs[i] to the WAIT's error (acked and errs are zero on entry, as long as cmds). Each command's
// own error is left in it.
func (s *Store) sendAdmits(ctx context.Context, keys []*redisHotKeys, cmds []redis.Cmder, acked []int64, errs []error) {
	if s.ack != nil {
		s.ack.sendAll(ctx, func(i int) string { return keys[i].admitSha[3].(string) }, cmds, acked, errs)
		return
	}
	pipe := s.client.Pipeline()
	for _, cmd := range cmds {
		_ = pipe.Process(ctx, cmd)
	}
	_, _ = pipe.Exec(ctx) // each command holds its own error
}

// admitDecision reads request i's {outcome, remaining, reservation_id, replayed} from
// admit.lua's reply; outcome 0 is qty above the per-user limit, bad input for that request only.
func admitDecision(reply []string, i int, activity string, qty int64) (admission.Decision, error) {
	d, err := redisParseDecision(reply[4*i:4*i+4], qty)
	if err == nil && d.Outcome == 0 {
		err = admission.BadInput("qty %d is above the per-user limit", qty)
	}
	if err != nil {
		return admission.Decision{}, fmt.Errorf("admit %s: %w", activity, err)
	}
	return d, nil
}

// The hot call, Admit, would otherwise build its key names and box them into go-redis's argument
// list on every script call: for admit.lua four concatenations, four boxings and a slice, most of
// a small batch's allocations. Each activity's are built and boxed once and kept here.

// redisHotKeys is one activity's prebuilt command arguments.
type redisHotKeys struct {
	// admitSha is the start of every admit.lua call: EVALSHA, the script's hash, the key count
	// and the keys (admitKeys); admitEval is the same with EVAL and the source, for NOSCRIPT.
	admitSha, admitEval []any
}

// maxHotKeys bounds the cache: activities beyond it (a deployment that creates and deletes many)
// get their arguments built per call, as before. Entries of deleted activities are a few strings.
const maxHotKeys = 1024

// redisKeyCache maps activity ids to their *redisHotKeys.
type redisKeyCache struct {
	m sync.Map
	n atomic.Int32
}

// hotKeys returns activity's prebuilt arguments. Only ids of validated requests reach it.
func (s *Store) hotKeys(activity string) *redisHotKeys {
	if v, ok := s.keyCache.m.Load(activity); ok {
		return v.(*redisHotKeys)
	}
	k := &redisHotKeys{}
	k.admitSha, k.admitEval = prebuiltEval(s.admit, luaAdmit, s.admitKeys(activity))
	if s.keyCache.n.Load() < maxHotKeys {
		if v, loaded := s.keyCache.m.LoadOrStore(activity, k); loaded {
			return v.(*redisHotKeys)
		}
		s.keyCache.n.Add(1)
	}
	return k
}

// prebuiltEval returns the start of an EVALSHA and an EVAL call of script (source src) with keys.
func prebuiltEval(script *redis.Script, src string, keys []string) (sha, eval []any) {
	sha, eval = make([]any, 3+len(keys)), make([]any, 3+len(keys))
	sha[0], sha[1], sha[2] = "evalsha", script.Hash(), len(keys)
	eval[0], eval[1], eval[2] = "eval", src, len(keys)
	for i, key := range keys {
		sha[3+i], eval[3+i] = key, key
	}
	return sha, eval
}

// admitBuckets is Admit for a split activity (r is validated): the decision is taken in the
// user's home bucket; when it has too little stock, stock is pulled in from the others and the
// decision taken again, so that sold_out is answered only when the activity as a whole has too
// little. An admission whose pulls were all emptied by other buyers before its next try, while
// stock remains, answers ErrContended: "try again", never a false sold_out.
func (s *Store) admitBuckets(ctx context.Context, r admission.Request, n int) (admission.Decision, error) {
	home := admission.HomeBucket(r.User, n)
	br := r
	br.Activity = bucketID(r.Activity, home, n)
	for pulls := 0; ; pulls++ {
		d, err := s.admitOn(ctx, br, 0)
		if err != nil {
			return admission.Decision{}, fmt.Errorf("admit %s: bucket %d: %w", r.Activity, home, err)
		}
		if d.ReservationID != "" {
			d.ReservationID = bucketEntryID(d.ReservationID, home)
		}
		switch {
		case d.Replayed || (d.Outcome != admission.SoldOut && d.Outcome != admission.Won):
			d.RemainingPartial = true
			return d, nil
		case d.Outcome == admission.Won && d.Remaining > 0:
			d.RemainingPartial = true
			return d, nil
		case d.Outcome == admission.SoldOut && pulls < maxPulls:
			moved, err := s.pullInto(ctx, r.Activity, n, home, r.Qty)
			if err != nil {
				return admission.Decision{}, fmt.Errorf("admit %s: %w", r.Activity, err)
			}
			if moved > 0 {
				if s.afterPull != nil {
					s.afterPull(r.Activity, home)
				}
				continue
			}
		}
		// The home bucket is empty: Remaining is the activity's, so that a Guard flags the
		// activity sold out only when every bucket is.
		left, err := s.bucketRemaining(ctx, r.Activity, n)
		if err != nil {
			if d.Outcome == admission.Won {
				d.RemainingPartial = true // a win stands; its Remaining of 0 is the home bucket's
				return d, nil
			}
			return admission.Decision{}, fmt.Errorf("admit %s: %w", r.Activity, err)
		}
		if d.Outcome == admission.SoldOut && left >= r.Qty {
			// The stock is somewhere (another bucket, or a transfer that finished between the
			// pull's reads): look again while pulls remain, then refuse as contended.
			if pulls < maxPulls {
				continue
			}
			s.bucketCounters.contended.Add(1)
			return admission.Decision{}, fmt.Errorf("admit %s: bucket %d: %w: %d items left after %d pulls",
				r.Activity, home, admission.ErrContended, left, pulls)
		}
		d.Remaining = left
		return d, nil
	}
}

// releaseBuckets is Release for a split activity: the reservation id names its bucket.
func (s *Store) releaseBuckets(ctx context.Context, activity, reservationID string, n int) (bool, error) {
	raw, i, ok := splitBucketEntryID(reservationID, n)
	if !ok {
		return false, fmt.Errorf("release %s %s: %w", activity, reservationID, admission.ErrNotFound)
	}
	return s.releaseOn(ctx, activity, bucketID(activity, i, n), raw)
}
