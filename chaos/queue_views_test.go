package chaos

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

// Raw views of the wins queue (docs/admission.md, "The wins queue"): one stream entry
// per admission call holds all its wins (fields at, left, then a user and "<qty> <request id>"
// pair per win); win k of entry E is "E-k"; the group's acknowledged win numbers of a pending
// entry are the hash :acked's field "<E> <group>" (",k1,k2,...,"), and the entry is XACKed once
// all are in it (admission/redisstore/lua/ack.lua). The views read Redis directly, not through the
// store's scripts, so that they check what the scripts wrote.

// entryWins is an entry's id and number of wins.
type entryWins struct {
	id   string
	wins int64
}

// rawEntries is XRANGE stream start end, read raw: go-redis's XMessage keeps fields in a map,
// which would merge two wins of one user in an entry.
func (e *env) rawEntries(ctx context.Context, stream, start, end string) ([]entryWins, error) {
	v, err := e.rdb.Do(ctx, "XRANGE", stream, start, end).Slice()
	if err != nil {
		return nil, fmt.Errorf("XRANGE %s %s %s: %w", stream, start, end, err)
	}
	return parseEntries(stream, v)
}

// parseEntries reads a raw XRANGE reply of entries.
func parseEntries(stream string, v []any) ([]entryWins, error) {
	out := make([]entryWins, 0, len(v))
	for _, x := range v {
		pair, ok := x.([]any)
		if !ok || len(pair) != 2 {
			return nil, fmt.Errorf("XRANGE %s: malformed entry %v", stream, x)
		}
		id, _ := pair[0].(string)
		fields, _ := pair[1].([]any)
		if len(fields) < 6 || len(fields)%2 != 0 || fields[0] != "at" || fields[2] != "left" {
			return nil, fmt.Errorf("XRANGE %s: entry %s is not an entry of wins: %v", stream, id, fields)
		}
		out = append(out, entryWins{id: id, wins: int64(len(fields)-4) / 2})
	}
	return out, nil
}

// ackedKey is the hash of acknowledged win numbers beside a wins stream.
func ackedKey(stream string) string { return strings.TrimSuffix(stream, ":orders") + ":acked" }

// ackedCount is how many numbers a :acked field (",k1,k2,...,") lists.
func ackedCount(v string) int64 {
	if v == "" {
		return 0
	}
	return int64(strings.Count(v, ",") - 1)
}

// splitWin cuts a win id "E-k" into its entry id and win number.
func splitWin(id string) (entry string, k int64, ok bool) {
	i := strings.LastIndexByte(id, '-')
	if i < 0 {
		return "", 0, false
	}
	k, err := strconv.ParseInt(id[i+1:], 10, 64)
	if err != nil || k < 1 || !strings.Contains(id[:i], "-") {
		return "", 0, false
	}
	return id[:i], k, true
}

// queuedWins is the activity's wins ever queued, as the store reports them (Snapshot.Queued:
// :meta's wins counter).
func (e *env) queuedWins() int64 {
	e.t.Helper()
	snap, err := e.store.Activity(context.Background(), e.act.id)
	if err != nil {
		e.t.Fatalf("activity %s: %v", e.act.id, err)
	}
	return snap.Queued
}

// pendingEntry is an entry pending in the group: its consumer, the wins it still holds
// unacknowledged (its wins less those in :acked) and those acknowledged already.
type pendingEntry struct {
	entryWins
	consumer string
	idle     time.Duration // since its last delivery
	left     int64         // wins not acknowledged
	acked    int64         // wins acknowledged, the entry still pending
}

// pendingEntries are the group's pending entries of the activity's stream, of consumer ("" for
// every consumer). The entries and their :acked fields are read in one pipeline.
func (e *env) pendingEntries(ctx context.Context, consumer string) ([]pendingEntry, error) {
	stream := e.streamKey()
	ps, err := e.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: group, Start: "-", End: "+",
		Count: 1 << 30, Consumer: consumer}).Result()
	if err != nil || len(ps) == 0 {
		if err != nil {
			err = fmt.Errorf("XPENDING %s %s: %w", stream, group, err)
		}
		return nil, err
	}
	pipe := e.rdb.Pipeline()
	xs := make([]*redis.Cmd, len(ps))
	as := make([]*redis.StringCmd, len(ps))
	for i, p := range ps {
		xs[i] = pipe.Do(ctx, "XRANGE", stream, p.ID, p.ID)
		as[i] = pipe.HGet(ctx, ackedKey(stream), p.ID+" "+group)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read the pending entries of %s: %w", stream, err)
	}
	out := make([]pendingEntry, 0, len(ps))
	for i, p := range ps {
		v, err := xs[i].Slice()
		if err != nil {
			return nil, fmt.Errorf("XRANGE %s %s: %w", stream, p.ID, err)
		}
		es, err := parseEntries(stream, v)
		if err != nil {
			return nil, err
		}
		if len(es) != 1 {
			return nil, fmt.Errorf("entry %s is pending in %s but not in %s", p.ID, group, stream)
		}
		a := ackedCount(as[i].Val())
		out = append(out, pendingEntry{entryWins: es[0], consumer: p.Consumer, idle: p.Idle, left: es[0].wins - a, acked: a})
	}
	return out, nil
}

// pendingWins is how many wins consumer holds delivered and not acknowledged, and how many of
// its pending entries are partly acknowledged.
func (e *env) pendingWins(consumer string) (held int64, partial int, err error) {
	ps, err := e.pendingEntries(context.Background(), consumer)
	if err != nil {
		return 0, 0, err
	}
	for _, p := range ps {
		held += p.left
		if p.acked > 0 {
			partial++
		}
	}
	return held, partial, nil
}

// backlogWins is the group's work left in wins, counted from the raw stream: the unacknowledged
// wins of its pending entries, and the wins of the entries after its last delivered id.
func (e *env) backlogWins() (pending, lag int64, err error) {
	ctx := context.Background()
	stream := e.streamKey()
	gs, err := e.rdb.XInfoGroups(ctx, stream).Result()
	if err != nil {
		return 0, 0, err
	}
	last := ""
	for _, g := range gs {
		if g.Name == group {
			last = g.LastDeliveredID
		}
	}
	if last == "" {
		return 0, 0, fmt.Errorf("no consumer group %q on %s", group, stream)
	}
	ps, err := e.pendingEntries(ctx, "")
	if err != nil {
		return 0, 0, err
	}
	for _, p := range ps {
		pending += p.left
	}
	es, err := e.rawEntries(ctx, stream, "("+last, "+")
	if err != nil {
		return 0, 0, err
	}
	for _, x := range es {
		lag += x.wins
	}
	return pending, lag, nil
}

// entriesAfter are the entries of the activity's stream after id ("-" for all).
func (e *env) entriesAfter(id string) []entryWins {
	e.t.Helper()
	start := "-"
	if id != "-" {
		start = "(" + id
	}
	es, err := e.rawEntries(context.Background(), e.streamKey(), start, "+")
	if err != nil {
		e.t.Fatal(err)
	}
	return es
}

// lastEntry is the id of the activity stream's last entry, "-" while it has none.
func (e *env) lastEntry() string {
	e.t.Helper()
	xs, err := e.rdb.XRevRangeN(context.Background(), e.streamKey(), "+", "-", 1).Result()
	if err != nil {
		e.t.Fatalf("XREVRANGE %s: %v", e.streamKey(), err)
	}
	if len(xs) == 0 {
		return "-"
	}
	return xs[0].ID
}

// winInStream reports whether the win id ("E-k", the reservation without its bucket)
// is win k of an entry E of stream.
func (e *env) winInStream(stream, id string) bool {
	e.t.Helper()
	entry, k, ok := splitWin(id)
	if !ok {
		e.t.Fatalf("reservation %q is not a win id E-k", id)
	}
	es, err := e.rawEntries(context.Background(), stream, entry, entry)
	if err != nil {
		e.t.Fatal(err)
	}
	return len(es) == 1 && k <= es[0].wins
}

// winOf is one win of an entry: its buyer and quantity.
type winOf struct {
	user string
	qty  int64
}

// entryPairs reads the wins of the entry id of the activity's stream, in order (win k is
// the k-th).
func (e *env) entryPairs(ctx context.Context, id string) ([]winOf, error) {
	stream := e.streamKey()
	v, err := e.rdb.Do(ctx, "XRANGE", stream, id, id).Slice()
	if err != nil || len(v) != 1 {
		return nil, fmt.Errorf("XRANGE %s %s: %d entries, %w", stream, id, len(v), err)
	}
	pair, _ := v[0].([]any)
	if len(pair) != 2 {
		return nil, fmt.Errorf("XRANGE %s %s: malformed entry", stream, id)
	}
	fields, _ := pair[1].([]any)
	var ws []winOf
	for i := 4; i+1 < len(fields); i += 2 {
		user, _ := fields[i].(string)
		val, _ := fields[i+1].(string)
		q, _, _ := strings.Cut(val, " ")
		qty, err := strconv.ParseInt(q, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("entry %s: win %d: qty %q: %w", id, len(ws)+1, val, err)
		}
		ws = append(ws, winOf{user: user, qty: qty})
	}
	return ws, nil
}

// finishPartOfEntry does for the killed consumer what a consumer does with all but the last win
// of one of its entries before it acknowledges them (the last left pending, as a failed order
// transaction or result write leaves it): it creates their orders in the database and writes the
// buyers' result records. It picks the pending entry of consumer delivered last among those
// with 2+ wins and none acknowledged, and returns its id and the win ids done, to acknowledge
// ("" when consumer holds no such entry).
func (e *env) finishPartOfEntry(ctx context.Context, consumer string) (string, []string, error) {
	ps, err := e.pendingEntries(ctx, consumer)
	if err != nil {
		return "", nil, err
	}
	// The youngest delivery first: a survivor claims entries idle for claimIdle, and this one
	// must still be the victim's when the test acknowledges part of it.
	var pick *pendingEntry
	for i := range ps {
		if ps[i].acked == 0 && ps[i].wins >= 2 && (pick == nil || ps[i].idle < pick.idle) {
			pick = &ps[i]
		}
	}
	if pick == nil {
		return "", nil, nil
	}
	ws, err := e.entryPairs(ctx, pick.id)
	if err != nil {
		return "", nil, err
	}
	ns := make([]orderbackend.NewOrder, 0, len(ws)-1)
	now := time.Now()
	for k, w := range ws[:len(ws)-1] {
		ns = append(ns, orderbackend.NewOrder{ID: orderbackend.NewOrderID(), Activity: e.act.id,
			ReservationID: fmt.Sprintf("%s-%d", pick.id, k+1), User: w.user, Qty: w.qty, CreatedAt: now, ExpiresAt: now.Add(15 * time.Minute)})
	}
	// One transaction, as the consumer's batch: the claim may come within claimIdle.
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	outs, err := e.orders().CreateOrders(octx, ns)
	cancel()
	if err != nil {
		return "", nil, fmt.Errorf("orders of entry %s: %w", pick.id, err)
	}
	ids := make([]string, 0, len(ns))
	for i, out := range outs {
		if out.Err != nil {
			return "", nil, fmt.Errorf("order of %s: %w", ns[i].ReservationID, out.Err)
		}
		o := out.Order
		r := admission.Result{Code: string(o.Status), ReservationID: o.ReservationID, OrderID: o.ID}
		if o.Status == orderbackend.StatusPending {
			r.PayBeforeMS = o.ExpiresAt.UnixMilli()
		}
		if err := e.store.SetResult(ctx, e.act.id, o.User, r); err != nil {
			return "", nil, fmt.Errorf("result of %s: %w", o.ReservationID, err)
		}
		ids = append(ids, o.ReservationID)
	}
	return pick.id, ids, nil
}

// pendingAt is the consumer entry id is pending at ("" when it is not pending) and how many of
// its wins :acked lists.
func (e *env) pendingAt(ctx context.Context, id string) (consumer string, acked int64, err error) {
	stream := e.streamKey()
	ps, err := e.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: group, Start: id, End: id, Count: 1}).Result()
	if err != nil {
		return "", 0, fmt.Errorf("XPENDING %s %s: %w", stream, id, err)
	}
	v, err := e.rdb.HGet(ctx, ackedKey(stream), id+" "+group).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", 0, fmt.Errorf("HGET %s: %w", ackedKey(stream), err)
	}
	if len(ps) == 1 {
		consumer = ps[0].Consumer
	}
	return consumer, ackedCount(v), nil
}

// ackedEntryFields are the "<entry> <group>" fields of the activity's :acked hash: entries with
// some but not all wins acknowledged.
func (e *env) ackedEntryFields() []string {
	e.t.Helper()
	ks, err := e.rdb.HKeys(context.Background(), ackedKey(e.streamKey())).Result()
	if err != nil {
		e.t.Fatalf("HKEYS %s: %v", ackedKey(e.streamKey()), err)
	}
	var out []string
	for _, k := range ks {
		if !strings.HasPrefix(k, "n ") {
			out = append(out, k)
		}
	}
	return out
}

// requireMultiWinEntries fails the test unless some entry of the activity's streams holds 2+
// wins: a sale of one-win entries would leave the queue's multi-win entries untested.
func (e *env) requireMultiWinEntries() {
	e.t.Helper()
	wins, entries, multi := e.multiWinEntries()
	if multi == 0 {
		e.t.Fatalf("the sale's %d wins are %d entries of one win each: multi-win entries untested", wins, entries)
	}
	e.t.Logf("the sale's %d wins are %d entries, %d of them with 2+ wins", wins, entries, multi)
}

// multiWinEntries counts the wins and the entries of the activity's streams (one, or one
// per bucket), and the entries among them that hold 2+ wins.
func (e *env) multiWinEntries() (wins, entries, multi int64) {
	e.t.Helper()
	for _, stream := range e.streamKeys() {
		es, err := e.rawEntries(context.Background(), stream, "-", "+")
		if err != nil {
			e.t.Fatal(err)
		}
		entries += int64(len(es))
		for _, x := range es {
			wins += x.wins
			if x.wins >= 2 {
				multi++
			}
		}
	}
	return wins, entries, multi
}
