package localstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// The Memory wins queue mirrors a Redis Stream with consumer groups: entries are never removed
// (XLEN counts them all), each group has a last-delivered position and a pending entries list
// (PEL) of delivered but unacknowledged entries, each with its owner, delivery count and last
// delivery time.

// memEntry is one queue entry; its id is also the win's reservation id.
type memEntry struct {
	id        string
	user      string
	qty       int64
	requestID string
	atMS      int64
	// id's two numbers, "<idMS>-<idSeq>": entries are in the order of their ids, and entryIndex
	// finds one by a binary search over these.
	idMS  int64
	idSeq uint64
}

// memGroup is one consumer group.
type memGroup struct {
	next    int                 // index of the first never-delivered entry (last-delivered + 1)
	pending map[int]*memPending // PEL, keyed by entry index (which orders like the ids)
}

// memPending is a PEL record.
type memPending struct {
	consumer   string
	deliveries int64
	at         time.Time // last delivery, on the store's clock
}

// append adds a win to the queue and wakes blocked readers; it returns the entry id, a view of the
// queue's arena. The caller holds a.mu.
func (a *memActivity) append(now time.Time, r admission.Request) string {
	var buf [41]byte // two uint64s and a dash
	id := a.nextID(buf[:0], now)
	// The id's bytes are copied into the arena at once: a view of buf does not outlive add.
	a.entries.add(memEntry{id: unsafe.String(&id[0], len(id)), user: r.User, qty: r.Qty, requestID: r.RequestID, atMS: now.UnixMilli(), idMS: a.lastMS, idSeq: a.seq})
	if a.arrived != nil {
		close(a.arrived)
		a.arrived = nil
	}
	return a.entries.id(a.entries.len() - 1)
}

// entryIndex returns the index of the entry whose id is id. Ids only grow (nextID), so entries
// are sorted by them and a binary search finds one: no map from id to index, whose insert was the
// largest part of a win in the store (docs/BENCHMARKS.md) and whose keys the collector scanned.
func (a *memActivity) entryIndex(id string) (int, bool) {
	ms, seq, ok := parseEntryID(id)
	if !ok {
		return 0, false
	}
	i := sort.Search(a.entries.len(), func(i int) bool {
		e := a.entries.slot(i)
		return e.idMS > ms || (e.idMS == ms && e.idSeq >= seq)
	})
	if i < a.entries.len() && a.entries.id(i) == id { // "7-01" parses as "7-1" does
		return i, true
	}
	return 0, false
}

// parseEntryID splits an entry id "<ms>-<seq>" (see memActivity.nextID).
func parseEntryID(id string) (ms int64, seq uint64, ok bool) {
	m, s, found := strings.Cut(id, "-")
	if !found {
		return 0, 0, false
	}
	ms, err1 := strconv.ParseInt(m, 10, 64)
	seq, err2 := strconv.ParseUint(s, 10, 64)
	return ms, seq, err1 == nil && err2 == nil
}

// win returns entry i as delivered for the deliveries-th time.
func (a *memActivity) win(i int, deliveries int64) admission.Win {
	e := a.entries.at(i)
	return admission.Win{
		ID: e.id, Activity: a.def.ID, ReservationID: e.id, User: e.user, Qty: e.qty,
		RequestID: e.requestID, At: time.UnixMilli(e.atMS), Deliveries: deliveries,
	}
}

// group returns a locked activity and its group, or an error with nothing locked.
func (s *Memory) group(ctx context.Context, op, activity, group string) (*memActivity, *memGroup, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("%s %s/%s: %w", op, activity, group, err)
	}
	a, err := s.lock(activity)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", op, err)
	}
	g := a.groups[group]
	if g == nil {
		a.mu.Unlock()
		return nil, nil, fmt.Errorf("%s %s: consumer group %q %w", op, activity, group, admission.ErrNotFound)
	}
	return a, g, nil
}

// checkQueueArgs checks the arguments ReadGroup and Claim share; wait is block or minIdle.
func checkQueueArgs(op, activity, group, consumer string, count int, wait time.Duration) error {
	if err := memCheckQueue(activity, group, consumer); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if count <= 0 || wait < 0 {
		return fmt.Errorf("%s %s: %w", op, activity, admission.BadInput("count %d must be positive and %s not negative", count, wait))
	}
	return nil
}

// EnsureGroup implements Queue.
func (s *Memory) EnsureGroup(ctx context.Context, activity, group string) error {
	if err := memCheckQueue(activity, group, "-"); err != nil {
		return fmt.Errorf("ensure group: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ensure group %s/%s: %w", activity, group, err)
	}
	a, err := s.lock(activity)
	if err != nil {
		return fmt.Errorf("ensure group: %w", err)
	}
	defer a.mu.Unlock()
	if a.groups[group] == nil {
		a.groups[group] = &memGroup{pending: make(map[int]*memPending)}
		s.journal(memChange{kind: changeGroup, act: activity, group: group})
	}
	return nil
}

// ReadGroup implements Queue. A blocking read returns as soon as an entry arrives, when block has
// passed (with no entries and no error), or with an error when ctx is done, the activity is deleted
// or the store is closed.
func (s *Memory) ReadGroup(ctx context.Context, activity, group, consumer string, count int, block time.Duration, pending bool) ([]admission.Win, error) {
	if err := checkQueueArgs("read group", activity, group, consumer, count, block); err != nil {
		return nil, err
	}
	var timeout <-chan time.Time
	for {
		a, g, err := s.group(ctx, "read group", activity, group)
		if err != nil {
			return nil, err
		}
		now := s.now()
		if pending {
			// Like XREADGROUP with id 0: this consumer's own PEL, oldest first, each redelivered.
			var wins []admission.Win
			for _, i := range g.sortedPending() {
				p := g.pending[i]
				if p.consumer != consumer {
					continue
				}
				p.deliveries++
				p.at = now
				s.journalPending(activity, group, i, p)
				wins = append(wins, a.win(i, p.deliveries))
				if len(wins) == count {
					break
				}
			}
			a.mu.Unlock()
			return wins, nil
		}
		if g.next < a.entries.len() {
			end := min(a.entries.len(), g.next+count)
			wins := make([]admission.Win, 0, end-g.next)
			var cs []memChange // the deliveries and the new position: one change for the journal
			if s.jnl != nil {
				cs = make([]memChange, 0, end-g.next+1)
			}
			for i := g.next; i < end; i++ {
				g.pending[i] = &memPending{consumer: consumer, deliveries: 1, at: now}
				if s.jnl != nil {
					cs = append(cs, memChange{kind: changePending, act: activity, group: group, idx: i, pend: *g.pending[i]})
				}
				wins = append(wins, a.win(i, 1))
			}
			g.next = end
			if s.jnl != nil {
				s.jnl.recordAll(append(cs, memChange{kind: changeNext, act: activity, group: group, idx: end}))
			}
			a.mu.Unlock()
			return wins, nil
		}
		if block <= 0 {
			a.mu.Unlock()
			return nil, nil
		}
		if a.arrived == nil {
			a.arrived = make(chan struct{})
		}
		arrived, gone := a.arrived, a.gone
		a.mu.Unlock()
		if timeout == nil {
			t := time.NewTimer(block)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-arrived: // another consumer of the group may take it first: look again
		case <-timeout:
			return nil, nil
		case <-ctx.Done():
			return nil, fmt.Errorf("read group %s/%s: %w", activity, group, ctx.Err())
		case <-gone:
			return nil, fmt.Errorf("read group: activity %s: %w", activity, admission.ErrUnknownActivity)
		case <-s.done:
			return nil, errMemoryClosed
		}
	}
}

// sortedPending returns the PEL's entry indexes in id order.
func (g *memGroup) sortedPending() []int {
	idx := make([]int, 0, len(g.pending))
	for i := range g.pending {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	return idx
}

// Ack implements Queue. Unknown ids, ids already acknowledged, an unknown group and an unknown
// activity are ignored, as XACK does.
func (s *Memory) Ack(ctx context.Context, activity, group string, ids ...string) error {
	if err := memCheckQueue(activity, group, "-"); err != nil {
		return fmt.Errorf("ack: %w", err)
	}
	for _, id := range ids {
		if err := memCheckName("entry id", id, admission.MaxRequestIDLen); err != nil {
			return fmt.Errorf("ack %s: %w", activity, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ack %s/%s: %w", activity, group, err)
	}
	a, err := s.lock(activity)
	if errors.Is(err, admission.ErrUnknownActivity) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("ack: %w", err)
	}
	defer a.mu.Unlock()
	g := a.groups[group]
	if g == nil {
		return nil
	}
	for _, id := range ids {
		if i, ok := a.entryIndex(id); ok {
			if _, ok := g.pending[i]; ok {
				delete(g.pending, i)
				s.journal(memChange{kind: changeAck, act: activity, group: group, idx: i})
			}
		}
	}
	return nil
}

// Claim implements Queue, like XAUTOCLAIM from the start of the PEL: entries of any consumer
// (this one included) idle for at least minIdle change owner, and their delivery count grows.
func (s *Memory) Claim(ctx context.Context, activity, group, consumer string, minIdle time.Duration, count int) ([]admission.Win, error) {
	if err := checkQueueArgs("claim", activity, group, consumer, count, minIdle); err != nil {
		return nil, err
	}
	a, g, err := s.group(ctx, "claim", activity, group)
	if err != nil {
		return nil, err
	}
	defer a.mu.Unlock()
	now := s.now()
	var wins []admission.Win
	for _, i := range g.sortedPending() {
		p := g.pending[i]
		if now.Sub(p.at) < minIdle {
			continue
		}
		p.consumer = consumer
		p.deliveries++
		p.at = now
		s.journalPending(activity, group, i, p)
		wins = append(wins, a.win(i, p.deliveries))
		if len(wins) == count {
			break
		}
	}
	return wins, nil
}

// DeadLetter implements Queue. Only w.ID is used, and only a pending entry is moved: dead-lettering an entry that was
// already acknowledged or dead-lettered (by this or another consumer) changes nothing, so a poison
// entry lands in the dead-letter queue once. The dead entry keeps the queue entry's id and data,
// with the delivery count from the PEL and the reason.
func (s *Memory) DeadLetter(ctx context.Context, activity, group string, w admission.Win, reason string) error {
	if err := memCheckQueue(activity, group, "-"); err != nil {
		return fmt.Errorf("dead letter: %w", err)
	}
	if err := memCheckName("entry id", w.ID, admission.MaxRequestIDLen); err != nil {
		return fmt.Errorf("dead letter %s: %w", activity, err)
	}
	if len(reason) > memMaxReason {
		return fmt.Errorf("dead letter %s: %w", activity, admission.BadInput("reason is longer than %d bytes", memMaxReason))
	}
	a, g, err := s.group(ctx, "dead letter", activity, group)
	if err != nil {
		return err
	}
	defer a.mu.Unlock()
	i, ok := a.entryIndex(w.ID)
	if !ok {
		return fmt.Errorf("dead letter %s: entry %s %w", activity, w.ID, admission.ErrNotFound)
	}
	p, ok := g.pending[i]
	if !ok {
		return nil
	}
	delete(g.pending, i)
	dead := a.win(i, p.deliveries)
	dead.Reason = reason
	a.dead = append(a.dead, dead)
	s.journal(memChange{kind: changeDead, act: activity, group: group, idx: i, pend: memPending{deliveries: p.deliveries}, reason: reason})
	return nil
}

// DeadLetters implements Queue.
func (s *Memory) DeadLetters(ctx context.Context, activity string, count int) ([]admission.Win, error) {
	if err := memCheckActivity(activity); err != nil {
		return nil, fmt.Errorf("dead letters: %w", err)
	}
	if count <= 0 {
		return nil, fmt.Errorf("dead letters %s: %w", activity, admission.BadInput("count %d must be positive", count))
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("dead letters %s: %w", activity, err)
	}
	a, err := s.lock(activity)
	if err != nil {
		return nil, fmt.Errorf("dead letters: %w", err)
	}
	defer a.mu.Unlock()
	return slices.Clone(a.dead[:min(count, len(a.dead))]), nil
}

// Backlog implements Queue: the entries after the group's position plus its PEL.
func (s *Memory) Backlog(ctx context.Context, activity, group string) (int64, error) {
	if err := memCheckQueue(activity, group, "-"); err != nil {
		return 0, fmt.Errorf("backlog: %w", err)
	}
	a, g, err := s.group(ctx, "backlog", activity, group)
	if err != nil {
		return 0, err
	}
	defer a.mu.Unlock()
	return int64(a.entries.len()-g.next) + int64(len(g.pending)), nil
}
