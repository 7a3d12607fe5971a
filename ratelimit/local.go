package ratelimit

import (
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"time"
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
//
// A flash sale fills a Local with a million distinct addresses and users, so its memory holds no
// pointers: a key is known by its 64-bit hash under a per-Local random seed (maphash), and its
// bucket and LRU links live in one slice per shard, linked by index. The collector never scans
// it, a new key allocates nothing once the shard is full, and a key costs about 60 bytes instead
// of the 350 a map of *rate.Limiter and a pointer-linked list took. Two keys whose hashes collide
// share a bucket; with a seed no client knows, that is as unlikely as it is harmless (a shared
// limit, never a lost one). The buckets follow golang.org/x/time/rate.Limiter's arithmetic
// exactly (TestLocalMatchesXTimeRate).
type Local struct {
	rate   Rate
	limit  float64 // tokens per second
	burst  float64
	base   time.Time // bucket times are nanoseconds since base: monotonic when the callers' are
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
		limit:  float64(r.Events) / r.Period.Seconds(),
		burst:  float64(r.Burst),
		base:   time.Now(),
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
	h := maphash.String(l.seed, key)
	t := int64(now.Sub(l.base))
	s := &l.shards[h%uint64(len(l.shards))]
	s.mu.Lock()
	b := s.get(h, t, l.burst)
	ok, tokens := l.take(b, t)
	s.mu.Unlock()

	d := Decision{Allowed: ok, Remaining: int(math.Max(0, math.Floor(tokens)))}
	if !ok {
		d.RetryAfter = l.durationFor(1 - tokens)
	}
	d.Reset = l.durationFor(l.burst - tokens)
	return d
}

// take takes one token from b at t if it has one, as rate.Limiter.AllowN(t, 1) does, and returns
// the decision and the tokens left at t (rate.Limiter.TokensAt): after the event when allowed,
// as they were when not.
func (l *Local) take(b *bucket, t int64) (bool, float64) {
	tokens := l.advance(b, t)
	left := tokens - 1
	var wait time.Duration
	if left < 0 {
		wait = time.Duration(-left / l.limit * float64(time.Second))
	}
	if wait > 0 {
		return false, tokens
	}
	b.tokens, b.last = left, t
	return true, left
}

// advance returns b's tokens at t: refilled for the time since its last event, at most the burst.
// A t before that event refills nothing.
func (l *Local) advance(b *bucket, t int64) float64 {
	last := b.last
	if t < last {
		last = t
	}
	tokens := b.tokens + time.Duration(t-last).Seconds()*l.limit
	if tokens > l.burst {
		tokens = l.burst
	}
	return tokens
}

// durationFor returns how long the bucket takes to refill the given number of tokens, rounded up
// so that a client waiting RetryAfter does find a token.
func (l *Local) durationFor(tokens float64) time.Duration {
	if tokens <= 0 {
		return 0
	}
	return time.Duration(math.Ceil(tokens / l.limit * float64(time.Second)))
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

// shard is an LRU of buckets: a map from key hash to an index in buckets, and a doubly linked
// list through buckets (by index) whose front is the most recently used. buckets[0] is the
// list's sentinel: its next is the front, its prev the back.
type shard struct {
	mu      sync.Mutex
	cap     int
	m       map[uint64]int32
	buckets []bucket
}

// bucket is one key's token bucket and its place in the LRU list.
type bucket struct {
	hash       uint64
	tokens     float64
	last       int64 // nanoseconds since Local.base of the last event allowed
	prev, next int32
}

func (s *shard) init(capacity int) {
	s.cap = min(capacity, math.MaxInt32-1) // buckets are indexed by int32
	s.m = make(map[uint64]int32)
	s.buckets = make([]bucket, 1, 16) // the sentinel, linked to itself
}

// get returns the bucket of the key hashing to h, marking it most recently used, and creates it
// full at t (reusing the least recently used bucket when the shard is full) when it is missing.
func (s *shard) get(h uint64, t int64, burst float64) *bucket {
	if i, ok := s.m[h]; ok {
		s.unlink(i)
		s.pushFront(i)
		return &s.buckets[i]
	}
	var i int32
	if len(s.m) >= s.cap {
		i = s.buckets[0].prev
		s.unlink(i)
		delete(s.m, s.buckets[i].hash)
	} else {
		i = int32(len(s.buckets))
		s.buckets = append(s.buckets, bucket{})
	}
	s.buckets[i] = bucket{hash: h, tokens: burst, last: t}
	s.m[h] = i
	s.pushFront(i)
	return &s.buckets[i]
}

func (s *shard) unlink(i int32) {
	b := &s.buckets[i]
	s.buckets[b.prev].next = b.next
	s.buckets[b.next].prev = b.prev
}

func (s *shard) pushFront(i int32) {
	front := s.buckets[0].next
	s.buckets[i].prev, s.buckets[i].next = 0, front
	s.buckets[front].prev = i
	s.buckets[0].next = i
}
