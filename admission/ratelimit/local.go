package ratelimit

import (
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// DefaultMaxKeys bounds a Local whose maxKeys is not positive.
const DefaultMaxKeys = 100_000

// Shards split a Local so that concurrent requests for different keys rarely wait on one mutex.
// Each shard keeps at least minShardKeys keys so that its LRU stays a fair approximation of a
// global one.
const (
	maxShards    = 64
	minShardKeys = 256
)

// Local is a node-local rate limiter: one token bucket per key, at most maxKeys buckets, the least
// recently used evicted first. Evicting a bucket forgets its state: a key that comes back starts
// with a full bucket, which is harmless for idle keys (their bucket had refilled anyway) and is the
// price of bounded memory under a flood of distinct keys. Local is safe for concurrent use.
type Local struct {
	rate   Rate
	limit  rate.Limit
	seed   maphash.Seed
	shards []shard
}

// NewLocal returns a Local enforcing r on each key. r must be valid (see ParseRate and
// Rate.Validate): NewLocal panics otherwise, as a limiter that cannot limit is a programming error.
func NewLocal(r Rate, maxKeys int) *Local {
	if err := r.Validate(); err != nil {
		panic(fmt.Sprintf("ratelimit: NewLocal with invalid rate %v: %v", r, err))
	}
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	n := 1
	for n < maxShards && maxKeys/(2*n) >= minShardKeys {
		n *= 2
	}
	l := &Local{
		rate:   r,
		limit:  rate.Limit(float64(r.Events) / r.Period.Seconds()),
		seed:   maphash.MakeSeed(),
		shards: make([]shard, n),
	}
	for i := range l.shards {
		// Spread the remainder so that the capacities add up to exactly maxKeys.
		c := maxKeys / n
		if i < maxKeys%n {
			c++
		}
		l.shards[i].init(c)
	}
	return l
}

// Rate returns the rate l enforces.
func (l *Local) Rate() Rate { return l.rate }

// Allow takes one event for key at time now and reports the decision.
func (l *Local) Allow(key string, now time.Time) Decision {
	s := &l.shards[maphash.String(l.seed, key)%uint64(len(l.shards))]
	s.mu.Lock()
	lim := s.get(key, l.limit, l.rate.Burst)
	ok := lim.AllowN(now, 1)
	tokens := lim.TokensAt(now)
	s.mu.Unlock()

	d := Decision{Allowed: ok, Remaining: int(math.Max(0, math.Floor(tokens)))}
	if !ok {
		d.RetryAfter = l.durationFor(1 - tokens)
	}
	d.Reset = l.durationFor(float64(l.rate.Burst) - tokens)
	return d
}

// durationFor returns how long the bucket takes to refill the given number of tokens, rounded up
// so that a client waiting RetryAfter does find a token.
func (l *Local) durationFor(tokens float64) time.Duration {
	if tokens <= 0 {
		return 0
	}
	return time.Duration(math.Ceil(tokens / float64(l.limit) * float64(time.Second)))
}

// Len returns the number of keys currently tracked.
func (l *Local) Len() int {
	n := 0
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}

// shard is an LRU of buckets: a map plus an intrusive doubly linked list whose front is the most
// recently used entry (intrusive, to spend one allocation per key rather than two).
type shard struct {
	mu   sync.Mutex
	cap  int
	m    map[string]*entry
	root entry // sentinel: root.next is the front, root.prev the back
}

type entry struct {
	key        string
	lim        *rate.Limiter
	prev, next *entry
}

func (s *shard) init(capacity int) {
	s.cap = capacity
	s.m = make(map[string]*entry)
	s.root.prev, s.root.next = &s.root, &s.root
}

// get returns key's limiter, marking it most recently used, and creates it (evicting the least
// recently used entry when the shard is full) when it is missing.
func (s *shard) get(key string, limit rate.Limit, burst int) *rate.Limiter {
	if e, ok := s.m[key]; ok {
		s.unlink(e)
		s.pushFront(e)
		return e.lim
	}
	var e *entry
	if len(s.m) >= s.cap {
		// Reuse the evicted entry; its limiter is replaced as rate.Limiter cannot be refilled.
		e = s.root.prev
		s.unlink(e)
		delete(s.m, e.key)
		e.key = key
		e.lim = rate.NewLimiter(limit, burst)
	} else {
		e = &entry{key: key, lim: rate.NewLimiter(limit, burst)}
	}
	s.m[key] = e
	s.pushFront(e)
	return e.lim
}

func (s *shard) unlink(e *entry) {
	e.prev.next, e.next.prev = e.next, e.prev
}

func (s *shard) pushFront(e *entry) {
	e.prev, e.next = &s.root, s.root.next
	s.root.next.prev = e
	s.root.next = e
}
