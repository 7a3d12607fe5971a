package localstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// errBucketsOneNode refuses a split activity in a store that has one node: there are no shards
// to spread the stock over.
var errBucketsOneNode = fmt.Errorf("%w: buckets needs store redis (one node has no shards to spread the stock over)", admission.ErrBadInput)

// errMemoryClosed is returned by every Memory call after Close.
var errMemoryClosed = errors.New("memory store is closed")

// MemoryOptions configures a Memory.
type MemoryOptions struct {
	// Now is the store's clock, the equivalent of Redis TIME: it decides the activity window,
	// stamps wins and ages pending queue entries. Nil means time.Now; tests pass a fake clock.
	Now func() time.Time
}

// Memory is the in-process Store, for tests, demos and `go run`. Its semantics are those of
// redisstore.Store, checked by the same conformance suite.
//
// It is NOT durable: stock, buyers, idempotency answers, results and the wins queue live in this
// process only and are lost when it exits, and a second process sees none of them. Use Store
// for one node that must survive a restart, redisstore.Store as soon as a sale runs on more than one
// node. (Store is a Memory whose changes are committed to disk before it answers.)
//
// Every activity has its own mutex, so activities never contend with each other, and the activity
// table is copied on write so that Admit finds its activity without taking any shared lock.
type Memory struct {
	now func() time.Time
	jnl memJournal // nil unless a Store persists this store's changes

	defMu sync.Mutex                              // serialises Define and Delete
	acts  atomic.Pointer[map[string]*memActivity] // copied on write, read without a lock

	subsMu sync.Mutex
	subs   map[*restockSub]struct{}

	spent proofSpent // the waiting rooms' spent proofs of work (pow.go)

	closeOnce sync.Once
	closed    atomic.Bool
	done      chan struct{} // closed by Close: ends blocking reads and subscriptions
}

// memActivity is everything one activity owns; Redis keeps the same state under the activity's
// hash-tagged keys.
type memActivity struct {
	gone chan struct{} // closed when the activity is deleted: ends blocking reads

	mu       sync.Mutex
	deleted  bool
	def      admission.Activity
	stock    int64
	users    userTable           // user → held items, answers and results (user.go)
	holders  int64               // users holding items: HLEN :buyers
	released map[string]struct{} // released reservation ids (:released)

	// The wins queue (:orders stream). A reservation id is its win's entry id, as in Redis.
	entries entryTable
	lastMS  int64 // last id's milliseconds and sequence: ids only grow
	seq     uint64
	groups  map[string]*memGroup
	dead    []admission.Win
	arrived chan struct{} // closed on the next append; nil while nobody waits

	line memLine // the waiting room's line (line.go), under its own lock
}

// NewMemory returns an empty in-memory store.
func NewMemory(opts MemoryOptions) *Memory {
	s := &Memory{
		now:  opts.Now,
		subs: make(map[*restockSub]struct{}),
		done: make(chan struct{}),
	}
	if s.now == nil {
		s.now = time.Now
	}
	empty := map[string]*memActivity{}
	s.acts.Store(&empty)
	return s
}

// lock returns the activity locked. An activity deleted while we waited for its lock is looked up
// again, so a concurrent re-creation is found.
func (s *Memory) lock(id string) (*memActivity, error) {
	for {
		if s.closed.Load() {
			return nil, errMemoryClosed
		}
		a := (*s.acts.Load())[id]
		if a == nil {
			return nil, fmt.Errorf("activity %s: %w", id, admission.ErrUnknownActivity)
		}
		a.mu.Lock()
		if !a.deleted {
			return a, nil
		}
		a.mu.Unlock()
	}
}

// setActivity publishes a copy of the activity table with id set to a (or removed when a is nil).
// The caller holds defMu.
func (s *Memory) setActivity(id string, a *memActivity) {
	old := *s.acts.Load()
	next := make(map[string]*memActivity, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	if a == nil {
		delete(next, id)
	} else {
		next[id] = a
	}
	s.acts.Store(&next)
}

// newMemActivity returns activity a with its whole stock and nothing else.
func newMemActivity(a admission.Activity) *memActivity {
	return &memActivity{
		gone:     make(chan struct{}),
		def:      a,
		stock:    a.Stock,
		users:    newUserTable(),
		released: make(map[string]struct{}),
		groups:   make(map[string]*memGroup),
	}
}

// Define implements Store.
func (s *Memory) Define(ctx context.Context, a admission.Activity, force bool) (admission.Activity, error) {
	if err := ctx.Err(); err != nil {
		return admission.Activity{}, fmt.Errorf("define %s: %w", a.ID, err)
	}
	a, err := a.Validate()
	if err != nil {
		return admission.Activity{}, fmt.Errorf("define: %w", err)
	}
	if a.Buckets > 1 {
		return admission.Activity{}, fmt.Errorf("define %s: %w", a.ID, errBucketsOneNode)
	}
	s.defMu.Lock()
	defer s.defMu.Unlock()
	if s.closed.Load() {
		return admission.Activity{}, errMemoryClosed
	}
	old := (*s.acts.Load())[a.ID]
	if old == nil {
		if a.Salt == "" {
			a.Salt = admission.NewSalt()
		}
		// Journal before publishing: once published, an admit may journal a win, which must
		// never come ahead of its activity's definition.
		s.journal(memChange{kind: changeDefine, act: a.ID, def: a})
		s.setActivity(a.ID, newMemActivity(a))
		return a, nil
	}

	old.mu.Lock()
	defer old.mu.Unlock()
	if admission.SameDefinition(old.def, a) {
		return old.def, nil
	}
	if s.now().UnixMilli() >= old.def.Start.UnixMilli() && !force {
		return admission.Activity{}, fmt.Errorf("define %s: %w", a.ID, admission.ErrActivityRunning)
	}
	if sold := old.def.Stock - old.stock; a.Stock < sold {
		return admission.Activity{}, fmt.Errorf("define %s: stock %d, sold %d: %w", a.ID, a.Stock, sold, admission.ErrStockBelowSold)
	}
	if a.Salt == "" {
		a.Salt = old.def.Salt
	}
	raised := a.Stock > old.def.Stock
	old.stock += a.Stock - old.def.Stock
	old.def = a
	s.journal(memChange{kind: changeDefine, act: a.ID, def: a})
	if raised {
		// Nodes that flagged the activity sold out look again at once, as after a release.
		s.publish(a.ID)
	}
	return a, nil
}

// Activity implements Store.
func (s *Memory) Activity(ctx context.Context, id string) (admission.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return admission.Snapshot{}, fmt.Errorf("activity %s: %w", id, err)
	}
	if err := memCheckActivity(id); err != nil {
		return admission.Snapshot{}, fmt.Errorf("activity: %w", err)
	}
	a, err := s.lock(id)
	if err != nil {
		return admission.Snapshot{}, err
	}
	defer a.mu.Unlock()
	return admission.Snapshot{
		Activity:  a.def,
		Remaining: a.stock,
		Sold:      a.def.Stock - a.stock,
		Buyers:    a.holders,
		Queued:    int64(a.entries.len()),
		Dead:      int64(len(a.dead)),
	}, nil
}

// Activities implements Store.
func (s *Memory) Activities(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("activities: %w", err)
	}
	if s.closed.Load() {
		return nil, errMemoryClosed
	}
	acts := *s.acts.Load()
	ids := make([]string, 0, len(acts))
	for id := range acts {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

// Delete implements Store.
func (s *Memory) Delete(ctx context.Context, id string, force bool) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete %s: %w", id, err)
	}
	if err := memCheckActivity(id); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	s.defMu.Lock()
	defer s.defMu.Unlock()
	a, err := s.lock(id)
	if err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	defer a.mu.Unlock()
	if now := s.now().UnixMilli(); !force && now >= a.def.Start.UnixMilli() && now < a.def.End.UnixMilli() {
		return fmt.Errorf("delete %s: %w", id, admission.ErrActivityRunning)
	}
	// Journal, then unpublish, before unlocking: a caller that finds the activity gone must find
	// its delete journaled (its answer waits for that commit), and one that finds it deleted
	// looks it up again and must not find it a second time.
	// The line's lock too: a join records its place under it, so none is recorded after the delete.
	a.line.mu.Lock()
	s.journal(memChange{kind: changeDelete, act: id})
	a.line.gone = true
	a.line.mu.Unlock()
	s.setActivity(id, nil)
	a.deleted = true
	close(a.gone)
	return nil
}

// Admit implements Store. The sold-out path allocates nothing (see BenchmarkMemoryAdmitSoldOut).
func (s *Memory) Admit(ctx context.Context, r admission.Request) (admission.Decision, error) {
	d, _, err := s.admit(ctx, r)
	return d, err
}

// admit is Admit, with the journal's ticket for the win it made (the zero ticket for any other
// answer): Store.Admit answers a win once that change is safe.
func (s *Memory) admit(ctx context.Context, r admission.Request) (admission.Decision, memTicket, error) {
	if err := ctx.Err(); err != nil {
		return admission.Decision{}, memTicket{}, fmt.Errorf("admit %s: %w", r.Activity, err)
	}
	if err := r.Validate(); err != nil {
		return admission.Decision{}, memTicket{}, fmt.Errorf("admit %s: %w", r.Activity, err)
	}
	a, err := s.lock(r.Activity)
	if err != nil {
		return admission.Decision{}, memTicket{}, fmt.Errorf("admit: %w", err)
	}
	defer a.mu.Unlock()

	u, h := a.users.find(r.User) // u is nil for a new user, added with h
	if u != nil {
		if d, ok := a.answer(u, r.RequestID); ok {
			d.Replayed = true
			return d, memTicket{}, nil
		}
	}
	now := s.now()
	switch ms := now.UnixMilli(); {
	case ms < a.def.Start.UnixMilli():
		return admission.Decision{Outcome: admission.NotStarted, Remaining: a.stock}, memTicket{}, nil
	case ms >= a.def.End.UnixMilli():
		return admission.Decision{Outcome: admission.Ended, Remaining: a.stock}, memTicket{}, nil
	}
	if r.Qty > a.def.Limit {
		return admission.Decision{}, memTicket{}, fmt.Errorf("admit %s: %w", r.Activity, admission.BadInput("qty %d is above the per-user limit %d", r.Qty, a.def.Limit))
	}
	if u != nil && u.held+r.Qty > a.def.Limit {
		return admission.Decision{Outcome: admission.LimitReached, Remaining: a.stock}, memTicket{}, nil
	}
	if a.stock < r.Qty {
		return admission.Decision{Outcome: admission.SoldOut, Remaining: a.stock}, memTicket{}, nil
	}

	a.stock -= r.Qty
	if u == nil {
		u = a.users.add(r.User, h)
	}
	a.take(u, r.Qty)
	id := a.append(now, r)
	a.recordWin(u, a.entries.len()-1, a.stock)
	d := admission.Decision{Outcome: admission.Won, ReservationID: id, Remaining: a.stock, Qty: r.Qty}
	var t memTicket
	if s.jnl != nil {
		t = s.jnl.record(memChange{kind: changeWin, act: r.Activity, idx: a.entries.len() - 1, entry: a.entries.at(a.entries.len() - 1), remaining: a.stock})
	}
	return d, t, nil
}

// Replay implements Store: Admit's replay, without the decision that would follow a miss.
func (s *Memory) Replay(ctx context.Context, activity, user, requestID string) (admission.Decision, error) {
	if err := ctx.Err(); err != nil {
		return admission.Decision{}, fmt.Errorf("replay %s: %w", activity, err)
	}
	if err := admission.CheckReplay(activity, user, requestID); err != nil {
		return admission.Decision{}, fmt.Errorf("replay %s: %w", activity, err)
	}
	a, err := s.lock(activity)
	if err != nil {
		return admission.Decision{}, fmt.Errorf("replay: %w", err)
	}
	defer a.mu.Unlock()
	if u, _ := a.users.find(user); u != nil {
		if d, ok := a.answer(u, requestID); ok {
			d.Replayed = true
			return d, nil
		}
	}
	return admission.Decision{}, fmt.Errorf("replay %s: no win of this request id: %w", activity, admission.ErrNotFound)
}

// nextID appends a new entry id shaped like a Redis stream id, "<ms>-<seq>", strictly greater than
// every earlier one even if the clock steps back.
func (a *memActivity) nextID(dst []byte, now time.Time) []byte {
	if ms := now.UnixMilli(); ms > a.lastMS {
		a.lastMS, a.seq = ms, 0
	} else {
		a.seq++
	}
	dst = strconv.AppendInt(dst, a.lastMS, 10)
	dst = append(dst, '-')
	return strconv.AppendUint(dst, a.seq, 10)
}

// Release implements Store.
func (s *Memory) Release(ctx context.Context, activity, reservationID string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("release %s/%s: %w", activity, reservationID, err)
	}
	if err := memCheckActivity(activity); err != nil {
		return false, fmt.Errorf("release: %w", err)
	}
	if err := memCheckName("reservation id", reservationID, admission.MaxRequestIDLen); err != nil {
		return false, fmt.Errorf("release %s: %w", activity, err)
	}
	a, err := s.lock(activity)
	if err != nil {
		return false, fmt.Errorf("release: %w", err)
	}
	i, ok := a.entryIndex(reservationID)
	if !ok {
		a.mu.Unlock()
		return false, fmt.Errorf("release %s/%s: reservation %w", activity, reservationID, admission.ErrNotFound)
	}
	if _, done := a.released[reservationID]; done {
		a.mu.Unlock()
		return false, nil
	}
	e := a.entries.at(i)
	a.released[reservationID] = struct{}{}
	s.journal(memChange{kind: changeRelease, act: activity, entry: e})
	a.stock += e.qty
	a.give(e.user, e.qty)
	a.mu.Unlock()
	s.publish(activity)
	return true, nil
}

// Remaining implements Store.
func (s *Memory) Remaining(ctx context.Context, activity string) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("remaining %s: %w", activity, err)
	}
	if err := memCheckActivity(activity); err != nil {
		return 0, fmt.Errorf("remaining: %w", err)
	}
	a, err := s.lock(activity)
	if err != nil {
		return 0, fmt.Errorf("remaining: %w", err)
	}
	defer a.mu.Unlock()
	return a.stock, nil
}

// HeldRequests implements Store. Only users holding items can have a win not released, so the
// others are skipped without looking at their wins.
func (s *Memory) HeldRequests(ctx context.Context, activity string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("held requests %s: %w", activity, err)
	}
	if err := memCheckActivity(activity); err != nil {
		return nil, fmt.Errorf("held requests: %w", err)
	}
	a, err := s.lock(activity)
	if err != nil {
		return nil, fmt.Errorf("held requests: %w", err)
	}
	defer a.mu.Unlock()
	ids := make([]string, 0, a.holders)
	a.users.each(func(_ string, u *memUser) {
		if u.held == 0 {
			return
		}
		a.eachWin(u, func(entry int) {
			if _, gone := a.released[a.entries.id(entry)]; !gone {
				ids = append(ids, strings.Clone(a.entries.requestID(entry))) // a copy: not a view pinning the arena
			}
		})
	})
	return ids, nil
}

// SetResult implements Store.
func (s *Memory) SetResult(ctx context.Context, activity, user string, r admission.Result) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("set result %s/%s: %w", activity, user, err)
	}
	if err := memCheckActivity(activity); err != nil {
		return fmt.Errorf("set result: %w", err)
	}
	if err := admission.CheckUserID(user); err != nil {
		return fmt.Errorf("set result %s: %w", activity, err)
	}
	if err := admission.CheckResultRecord(r); err != nil {
		return fmt.Errorf("set result %s: %w", activity, err)
	}
	a, err := s.lock(activity)
	if err != nil {
		return fmt.Errorf("set result: %w", err)
	}
	defer a.mu.Unlock()
	u := a.user(user)
	a.fold(u, r, false)
	if s.jnl != nil {
		// The folded record, with the user's Reservations, so a load needs no fold of its own
		// except for the wins that came after it (see loadLocal).
		top, resvs, _ := a.result(u)
		top.Reservations = slices.Clone(resvs)
		s.jnl.record(memChange{kind: changeResult, act: activity, user: user, result: top, idx: a.entries.len()})
	}
	return nil
}

// GetResult implements Store.
func (s *Memory) GetResult(ctx context.Context, activity, user string) (admission.Result, error) {
	var r admission.Result
	err := s.readResult(ctx, "get result", activity, user, func(top admission.Result, resvs []admission.Result) {
		r, r.Reservations = top, slices.Clone(resvs)
	})
	return r, err
}

// AppendResult implements Store: GetResult, encoded while the activity is locked, so a poll
// copies nothing.
func (s *Memory) AppendResult(ctx context.Context, dst []byte, activity, user string) ([]byte, string, error) {
	var code string
	err := s.readResult(ctx, "append result", activity, user, func(top admission.Result, resvs []admission.Result) {
		top.Reservations = resvs
		dst, code = admission.AppendResultJSON(dst, top), top.Code
	})
	return dst, code, err
}

// readResult checks a result read and calls read with user's latest record and per-reservation
// records while activity's lock is held (read must not keep resvs).
func (s *Memory) readResult(ctx context.Context, op, activity, user string, read func(top admission.Result, resvs []admission.Result)) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s %s/%s: %w", op, activity, user, err)
	}
	if err := memCheckActivity(activity); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if err := admission.CheckUserID(user); err != nil {
		return fmt.Errorf("%s %s: %w", op, activity, err)
	}
	a, err := s.lock(activity)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	defer a.mu.Unlock()
	var top admission.Result
	var resvs []admission.Result
	ok := false
	if u := a.findUser(user); u != nil {
		top, resvs, ok = a.result(u)
	}
	if !ok {
		return fmt.Errorf("%s %s/%s: %w", op, activity, user, admission.ErrNotFound)
	}
	read(top, resvs)
	return nil
}

// Close implements Store: it ends every subscription and blocking read. The state is discarded
// with the store.
func (s *Memory) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.done)
	})
	return nil
}
