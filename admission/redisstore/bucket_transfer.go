package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/internal/ticker"
)

// Stock transfers between the buckets of a split activity. One transfer moves items from bucket
// `from` to bucket `to` (-1 is outside the buckets: a raise gives from outside, a cut takes to
// outside) in four steps, each idempotent under the transfer's id:
//
//  1. the intent "from to qty ms gen" is recorded in the parent's intents hash (bucket_intent.lua),
//     gen naming the parent's definition, which the next steps check (a transfer begun before a
//     delete must not give to the next definition's buckets);
//  2. bucket_take.lua on the source takes min(qty, unsold) and logs the number under the id;
//  3. bucket_give.lua on the destination adds that number, once, and logs the id;
//  4. bucket_finish.lua removes the intent.
//
// A runner that dies between steps leaves the intent; recoverTransfers runs the steps again:
// the take answers its logged number (or takes now, if it never ran), the give gives once. Two
// runners of one transfer are therefore harmless, and no item is created or destroyed. The logs
// are kept until the activity is deleted, so that a late runner never finds a step undone.

const (
	// defaultRebalanceInterval is Options.RebalanceInterval's default.
	defaultRebalanceInterval = 250 * time.Millisecond
	// recoverAfter is how old an intent must be before the rebalancer completes it: younger ones
	// are most likely still being run by their owner (running them too would be harmless).
	recoverAfter = 2 * time.Second
	// maxPulls bounds the pulls one admission makes into its dry home bucket. Every pull moves at
	// least one item, but under contention others may win it before this admission's next try
	// (at the end of a skewed sale, 32 buyers racing for single items needed more than 8).
	maxPulls = 64
)

// transfer moves up to qty unsold items of activity from bucket from to bucket to (either may be
// -1, see above) and returns the number moved.
func (s *Store) transfer(ctx context.Context, activity string, n, from, to int, qty int64) (int64, error) {
	id := admission.NewSalt()[:16]
	gen, err := scriptBucketIntent.Run(ctx, s.client, []string{s.key(activity, "meta"), s.intentsKey(activity)},
		id, from, to, qty, time.Now().UnixMilli()).Text()
	if err != nil {
		s.bucketCounters.failed.Add(1)
		return 0, fmt.Errorf("transfer %s: record intent: %w", activity, redisScriptErr(err))
	}
	q, err := s.runTransfer(ctx, activity, n, id, gen, from, to, qty)
	if err != nil {
		s.bucketCounters.failed.Add(1)
		return 0, err
	}
	s.bucketCounters.transfers.Add(1)
	s.bucketCounters.moved.Add(q)
	return q, nil
}

// transferStep runs one step's script. With Options.ReplicasAck a step counts as done only
// once the replicas have it: the next step never runs after one a failover could lose (a lost
// take loses its log with it, so the recovery takes again, consistently).
func (s *Store) transferStep(ctx context.Context, script *redis.Script, src string, keys []string, args ...any) (*redis.Cmd, error) {
	if s.ack == nil {
		cmd := script.Run(ctx, s.client, keys, args...)
		return cmd, redisScriptErr(cmd.Err())
	}
	cmd, acked, err := s.evalAcked(ctx, script, src, keys, args...)
	if cmd.Err() != nil {
		return cmd, redisScriptErr(cmd.Err())
	}
	if err != nil {
		return cmd, err
	}
	if acked < s.ack.n {
		return cmd, &admission.ReplicationError{Op: "transfer", Activity: keys[0], Wanted: s.ack.n, Acked: acked}
	}
	return cmd, nil
}

// runTransfer runs steps 2 to 4 of a recorded transfer.
func (s *Store) runTransfer(ctx context.Context, activity string, n int, id, gen string, from, to int, qty int64) (int64, error) {
	q := qty
	if from >= 0 {
		b := bucketID(activity, from, n)
		cmd, err := s.transferStep(ctx, scriptBucketTake, luaBucketTake,
			[]string{s.key(b, "meta"), s.key(b, "stock"), s.transferLogKey(b)}, id, qty, gen)
		if err == nil {
			q, err = cmd.Int64()
		}
		if err != nil {
			return 0, fmt.Errorf("transfer %s %s: take from bucket %d: %w", activity, id, from, err)
		}
	}
	var delta int64
	if to >= 0 {
		b := bucketID(activity, to, n)
		_, err := s.transferStep(ctx, scriptBucketGive, luaBucketGive,
			[]string{s.key(b, "meta"), s.key(b, "stock"), s.transferLogKey(b)}, id, q, s.channel, activity, gen)
		if err != nil {
			return 0, fmt.Errorf("transfer %s %s: give to bucket %d: %w", activity, id, to, err)
		}
	} else {
		delta = -q
	}
	_, err := s.transferStep(ctx, scriptBucketFinish, luaBucketFinish,
		[]string{s.key(activity, "meta"), s.intentsKey(activity)}, id, delta, gen)
	if err != nil {
		return 0, fmt.Errorf("transfer %s %s: finish: %w", activity, id, err)
	}
	return q, nil
}

// recoverTransfers completes activity's pending transfers recorded at least minAge ago, and
// returns how many it completed.
func (s *Store) recoverTransfers(ctx context.Context, activity string, n int, minAge time.Duration) (int, error) {
	intents, err := s.client.HGetAll(ctx, s.intentsKey(activity)).Result()
	if err != nil {
		return 0, fmt.Errorf("recover transfers of %s: %w", activity, err)
	}
	now, done := time.Now(), 0
	parentGen, genRead := "", false // for intents recorded without a gen
	for id, v := range intents {
		from, to, qty, ms, gen, err := parseIntent(v)
		if err != nil {
			return done, fmt.Errorf("recover transfers of %s: intent %s: %w", activity, id, err)
		}
		if gen == "" {
			// Recorded by a build before gens (during a rolling deploy) or into a parent defined
			// before them: the parent's definition now, as that build assumed.
			if !genRead {
				if parentGen, err = s.client.HGet(ctx, s.key(activity, "meta"), "gen").Result(); err != nil && !errors.Is(err, redis.Nil) {
					return done, fmt.Errorf("recover transfers of %s: %w", activity, err)
				}
				genRead = true
			}
			gen = parentGen
		}
		if now.Sub(time.UnixMilli(ms)) < minAge {
			continue
		}
		q, err := s.runTransfer(ctx, activity, n, id, gen, from, to, qty)
		if err != nil {
			s.bucketCounters.failed.Add(1)
			return done, fmt.Errorf("recover transfers of %s: %w", activity, err)
		}
		done++
		s.bucketCounters.recovered.Add(1)
		s.bucketCounters.transfers.Add(1)
		s.bucketCounters.moved.Add(q)
	}
	return done, nil
}

// parseIntent reads a transfer intent, "from to qty ms gen" (gen absent for a parent defined
// before gens).
func parseIntent(v string) (from, to int, qty, ms int64, gen string, err error) {
	f := strings.Fields(v)
	if len(f) != 4 && len(f) != 5 {
		return 0, 0, 0, 0, "", fmt.Errorf("malformed intent %q", v)
	}
	if _, err := fmt.Sscan(v, &from, &to, &qty, &ms); err != nil {
		return 0, 0, 0, 0, "", fmt.Errorf("malformed intent %q: %w", v, err)
	}
	if len(f) == 5 {
		gen = f[4]
	}
	return from, to, qty, ms, gen, nil
}

// pullInto moves stock into bucket home of a split activity, where an admission needing qty
// found too little: half the richest other bucket's stock, and at least qty (or all it has).
// Concurrent pulls into one bucket share one transfer (pullFlight). It returns the items moved:
// 0 when no other bucket has any.
func (s *Store) pullInto(ctx context.Context, activity string, n, home int, qty int64) (int64, error) {
	key := bucketID(activity, home, n)
	return s.pulls.do(key, func() (int64, error) {
		st, err := s.bucketStocks(ctx, activity, n)
		if err != nil {
			return 0, err
		}
		if st.buckets[home].stock >= qty {
			return st.buckets[home].stock, nil // another pull (or a release) came first
		}
		from := st.richest(home)
		if from < 0 {
			// Items a transfer took and has not given yet (its runner failed, say on a
			// failover, or died) are in no bucket: complete such transfers before the
			// activity may be called sold out. An error here is a 503, never a sold_out.
			if done, err := s.recoverTransfers(ctx, activity, n, 0); err != nil || done == 0 {
				return 0, err
			}
			if st, err = s.bucketStocks(ctx, activity, n); err != nil {
				return 0, err
			}
			if st.buckets[home].stock >= qty {
				return st.buckets[home].stock, nil
			}
			if from = st.richest(home); from < 0 {
				return 0, nil
			}
		}
		s.bucketCounters.dryPulls.Add(1)
		return s.transfer(ctx, activity, n, from, home, max(qty, (st.buckets[from].stock+1)/2))
	})
}

// pullFlight lets concurrent pulls into one bucket share one transfer.
type pullFlight struct {
	mu sync.Mutex
	m  map[string]*pullCall
}

type pullCall struct {
	done chan struct{}
	n    int64
	err  error
}

func (p *pullFlight) do(key string, f func() (int64, error)) (int64, error) {
	p.mu.Lock()
	if c, ok := p.m[key]; ok {
		p.mu.Unlock()
		<-c.done
		return c.n, c.err
	}
	if p.m == nil {
		p.m = map[string]*pullCall{}
	}
	c := &pullCall{done: make(chan struct{})}
	p.m[key] = c
	p.mu.Unlock()
	c.n, c.err = f()
	p.mu.Lock()
	delete(p.m, key)
	p.mu.Unlock()
	close(c.done)
	return c.n, c.err
}

// bucketRebalancer runs inside the store (Options.RebalanceInterval): from the first split
// activity the store serves until Close.
type bucketRebalancer struct {
	interval time.Duration
	once     sync.Once
	done     chan struct{} // closed when the loop has ended
}

// RebalanceInterval returns how often the store's rebalancer runs (Options.RebalanceInterval,
// its default filled in); negative when it is off.
func (s *Store) RebalanceInterval() time.Duration { return s.rebalance.interval }

// startRebalancer starts the rebalancer once, unless it is turned off.
func (s *Store) startRebalancer() {
	if s.rebalance.interval < 0 {
		return
	}
	s.rebalance.once.Do(func() {
		s.rebalance.done = make(chan struct{})
		go s.rebalanceLoop()
	})
}

func (s *Store) rebalanceLoop() {
	defer close(s.rebalance.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	ticker.Every(ctx, s.rebalance.interval, func() {
		s.bucketCache.Range(func(k, v any) bool {
			if n := v.(int); n > 1 {
				// Other errors are left for the next round (a failover); an activity another
				// node deleted is forgotten.
				if err := s.RebalanceOnce(ctx, k.(string)); errors.Is(err, admission.ErrUnknownActivity) {
					s.bucketCache.Delete(k)
					s.bucketLevels.Delete(k)
				}
			}
			return ctx.Err() == nil
		})
	})
}

// RebalanceOnce completes activity's transfers left pending for a while (a crashed runner) and
// moves stock from its richest bucket to its poorest when the poorest has less than a quarter of
// the richest: what the store's rebalancer does every RebalanceInterval. An activity that is not
// split is left alone.
func (s *Store) RebalanceOnce(ctx context.Context, activity string) error {
	n, err := s.bucketCount(ctx, activity)
	if err != nil || n < 2 {
		return err
	}
	if _, err := s.recoverTransfers(ctx, activity, n, recoverAfter); err != nil {
		return err
	}
	st, err := s.bucketStocks(ctx, activity, n)
	if err != nil {
		return err
	}
	rich, poor := st.richest(-1), 0
	for i, b := range st.buckets {
		if b.stock < st.buckets[poor].stock {
			poor = i
		}
	}
	if rich < 0 || rich == poor {
		return nil
	}
	hi, lo := st.buckets[rich].stock, st.buckets[poor].stock
	if hi < 2 || lo*4 >= hi {
		return nil
	}
	_, err = s.transfer(ctx, activity, n, rich, poor, (hi-lo)/2)
	return err
}
