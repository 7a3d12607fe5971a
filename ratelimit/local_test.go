package ratelimit

import (
	"fmt"
	"math"
	mrand "math/rand/v2"
	"net/netip"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

var t0 = time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC)

func TestLocalBurstThenDenied(t *testing.T) {
	l := NewLocal(Rate{Events: 2, Period: time.Second, Burst: 4}, 10)
	for i := 0; i < 4; i++ {
		d := l.Allow("k", t0)
		if !d.Allowed {
			t.Fatalf("event %d of the burst denied: %+v", i, d)
		}
		if d.Remaining != 3-i {
			t.Errorf("event %d: remaining %d, want %d", i, d.Remaining, 3-i)
		}
		if d.RetryAfter != 0 {
			t.Errorf("event %d: allowed with RetryAfter %v", i, d.RetryAfter)
		}
	}
	d := l.Allow("k", t0)
	if d.Allowed {
		t.Fatal("event beyond the burst allowed")
	}
	if d.RetryAfter != 500*time.Millisecond {
		t.Errorf("RetryAfter %v, want 500ms (one token at 2/s)", d.RetryAfter)
	}
	if d.Reset != 2*time.Second {
		t.Errorf("Reset %v, want 2s (4 tokens at 2/s)", d.Reset)
	}
	if d.Remaining != 0 {
		t.Errorf("Remaining %d, want 0", d.Remaining)
	}
	// Another key is untouched.
	if d := l.Allow("other", t0); !d.Allowed || d.Remaining != 3 {
		t.Errorf("other key: %+v, want allowed with 3 remaining", d)
	}
}

func TestLocalRefill(t *testing.T) {
	l := NewLocal(Rate{Events: 2, Period: time.Second, Burst: 2}, 10)
	l.Allow("k", t0)
	l.Allow("k", t0)
	d := l.Allow("k", t0)
	if d.Allowed {
		t.Fatal("third event in one instant allowed")
	}
	// Waiting less than RetryAfter is not enough; waiting RetryAfter is.
	if d2 := l.Allow("k", t0.Add(d.RetryAfter/2)); d2.Allowed {
		t.Fatalf("allowed after half of RetryAfter (%v)", d.RetryAfter)
	}
	now := t0.Add(d.RetryAfter)
	if d2 := l.Allow("k", now); !d2.Allowed {
		t.Fatalf("denied after RetryAfter %v: %+v", d.RetryAfter, d2)
	}
	// After a long idle time the bucket is full again, never fuller.
	now = now.Add(time.Hour)
	for i := 0; i < 2; i++ {
		if !l.Allow("k", now).Allowed {
			t.Fatalf("event %d after refill denied", i)
		}
	}
	if l.Allow("k", now).Allowed {
		t.Fatal("bucket refilled beyond its burst")
	}
}

func TestLocalLRUBound(t *testing.T) {
	for _, max := range []int{1, 10, 1000, 10_000} {
		l := NewLocal(Rate{Events: 1, Period: time.Second, Burst: 1}, max)
		n := 3*max + 10
		for i := 0; i < n; i++ {
			l.Allow(fmt.Sprint("key-", i), t0)
			if i%1000 == 0 && l.Len() > max {
				t.Fatalf("max %d: Len %d after %d keys", max, l.Len(), i+1)
			}
		}
		if got := l.Len(); got > max || got < max/2 {
			t.Errorf("max %d: Len %d after %d keys, want at most %d (and not far below)", max, got, n, max)
		}
	}
}

func TestLocalLRUEvictsLeastRecentlyUsed(t *testing.T) {
	l := NewLocal(Rate{Events: 1, Period: time.Hour, Burst: 1}, 3) // one shard: exact LRU
	for _, k := range []string{"a", "b", "c"} {
		l.Allow(k, t0)
	}
	l.Allow("a", t0) // a is now the most recently used; b the least
	l.Allow("d", t0) // evicts b
	if l.Allow("a", t0).Allowed || l.Allow("c", t0).Allowed || l.Allow("d", t0).Allowed {
		t.Error("a kept key lost its (empty) bucket")
	}
	if !l.Allow("b", t0).Allowed {
		t.Error("b was not evicted: its empty bucket is still there")
	}
}

func TestLocalMillionKeysBounded(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("a million keys: run without -short and -race")
	}
	const max = 100_000
	l := NewLocal(Rate{Events: 20, Period: time.Second, Burst: 40}, max)
	for i := 0; i < 1_000_000; i++ {
		l.Allow(fmt.Sprint(i), t0)
	}
	if got := l.Len(); got > max {
		t.Fatalf("Len %d > %d", got, max)
	}
}

func TestLocalConcurrentNeverExceedsBurst(t *testing.T) {
	l := NewLocal(Rate{Events: 1, Period: time.Hour, Burst: 50}, 1000)
	var mu sync.Mutex
	allowed := 0
	var wg sync.WaitGroup
	for g := 0; g < 20; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				if l.Allow("hot", t0).Allowed {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
				l.Allow(fmt.Sprint("cold-", i), t0)
			}
		}()
	}
	wg.Wait()
	if allowed != 50 {
		t.Errorf("%d of 400 events allowed in one instant, want exactly the burst 50", allowed)
	}
}

func TestIPKey(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"192.0.2.7", "192.0.2.7"},
		{"::ffff:192.0.2.7", "192.0.2.7"},
		{"2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::/64"},
		{"fe80::1%eth0", "fe80::/64"},
	} {
		if got := IPKey(netip.MustParseAddr(c.in)); got != c.want {
			t.Errorf("IPKey(%s) = %q, want %q", c.in, got, c.want)
		}
	}
	if got := IPKey(netip.Addr{}); got != "" {
		t.Errorf("IPKey(zero) = %q, want empty", got)
	}
}

// TestIPKeyString checks that the textual form keys like IPKey of the parsed address, IPv4
// included (returned as given), and refuses what is not an address.
func TestIPKeyString(t *testing.T) {
	for _, in := range []string{
		"192.0.2.7", "0.0.0.0", "255.255.255.255", "::ffff:192.0.2.7", "::1",
		"2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:DB8::1", "fe80::1%eth0", "::ffff:c000:207",
	} {
		got, ok := IPKeyString(in)
		if want := IPKey(netip.MustParseAddr(in)); !ok || got != want {
			t.Errorf("IPKeyString(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "unknown", "192.0.2.07", "192.0.2", "192.0.2.7%eth0", " 192.0.2.7", "192.0.2.7:80"} {
		if got, ok := IPKeyString(in); ok {
			t.Errorf("IPKeyString(%q) = %q, true; want false", in, got)
		}
	}
}

func TestIPv6Slash64SharesBucket(t *testing.T) {
	l := NewLocal(Rate{Events: 1, Period: time.Hour, Burst: 1}, 100)
	a := IPKey(netip.MustParseAddr("2001:db8:0:1::1"))
	b := IPKey(netip.MustParseAddr("2001:db8:0:1:ffff:ffff:ffff:ffff"))
	other := IPKey(netip.MustParseAddr("2001:db8:0:2::1"))
	if !l.Allow(a, t0).Allowed {
		t.Fatal("first address denied")
	}
	if l.Allow(b, t0).Allowed {
		t.Error("a second address of the same /64 got its own bucket")
	}
	if !l.Allow(other, t0).Allowed {
		t.Error("an address of another /64 shares the bucket")
	}

	v4 := IPKey(netip.MustParseAddr("198.51.100.9"))
	mapped := IPKey(netip.MustParseAddr("::ffff:198.51.100.9"))
	if !l.Allow(v4, t0).Allowed {
		t.Fatal("IPv4 address denied")
	}
	if l.Allow(mapped, t0).Allowed {
		t.Error("the IPv4-mapped form of an address got its own bucket")
	}
}

func BenchmarkLocalAllow(b *testing.B) {
	l := NewLocal(Rate{Events: 20, Period: time.Second, Burst: 40}, 100_000)
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = IPKey(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}))
	}
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		now := t0
		for pb.Next() {
			l.Allow(keys[i%len(keys)], now)
			i++
		}
	})
}

// BenchmarkLocalBytesPerKey reports the heap a full Local holds per tracked key.
func BenchmarkLocalBytesPerKey(b *testing.B) {
	const n = 100_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = IPKey(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}))
	}
	for i := 0; i < b.N; i++ {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		l := NewLocal(Rate{Events: 20, Period: time.Second, Burst: 40}, n)
		for _, k := range keys {
			l.Allow(k, t0)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/key")
		runtime.KeepAlive(l)
	}
}

// refLocal is Local as it was built on golang.org/x/time/rate (one *rate.Limiter per key, no
// bound): the yardstick of TestLocalMatchesXTimeRate.
type refLocal struct {
	r    Rate
	lims map[string]*rate.Limiter
}

func (rl *refLocal) Allow(key string, now time.Time) Decision {
	limit := rate.Limit(float64(rl.r.Events) / rl.r.Period.Seconds())
	lim := rl.lims[key]
	if lim == nil {
		lim = rate.NewLimiter(limit, rl.r.Burst)
		rl.lims[key] = lim
	}
	ok := lim.AllowN(now, 1)
	tokens := lim.TokensAt(now)
	durationFor := func(tokens float64) time.Duration {
		if tokens <= 0 {
			return 0
		}
		return time.Duration(math.Ceil(tokens / float64(limit) * float64(time.Second)))
	}
	d := Decision{Allowed: ok, Remaining: int(math.Max(0, math.Floor(tokens)))}
	if !ok {
		d.RetryAfter = durationFor(1 - tokens)
	}
	d.Reset = durationFor(float64(rl.r.Burst) - tokens)
	return d
}

// TestLocalMatchesXTimeRate checks Local's buckets against x/time/rate's limiters, decision for
// decision, over random keys and times (including times going backwards) for several rates.
func TestLocalMatchesXTimeRate(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(3, 4))
	for _, r := range []Rate{
		{Events: 20, Period: time.Second, Burst: 40},
		{Events: 2, Period: time.Second, Burst: 2},
		{Events: 1, Period: time.Hour, Burst: 1},
		{Events: 7, Period: 3 * time.Second, Burst: 3},
		{Events: 1000, Period: time.Millisecond, Burst: 5},
	} {
		l := NewLocal(r, 1_000_000)
		ref := &refLocal{r: r, lims: map[string]*rate.Limiter{}}
		now := t0
		for i := range 20_000 {
			switch rng.IntN(10) {
			case 0:
				now = now.Add(-time.Duration(rng.Int64N(int64(time.Second))))
			case 1, 2, 3:
				now = now.Add(time.Duration(rng.Int64N(int64(r.Period))))
			case 4:
				now = now.Add(time.Duration(rng.Int64N(1000)))
			}
			key := strconv.Itoa(rng.IntN(50))
			got, want := l.Allow(key, now), ref.Allow(key, now)
			if got != want {
				t.Fatalf("rate %v, event %d, key %s: got %+v, want %+v", r, i, key, got, want)
			}
		}
	}
}

// BenchmarkLocalAllowNewKeys is a flood of distinct keys, as in a flash sale's first seconds:
// every event creates a bucket and, the Local being full, evicts one.
func BenchmarkLocalAllowNewKeys(b *testing.B) {
	l := NewLocal(Rate{Events: 20, Period: time.Second, Burst: 40}, 100_000)
	keys := make([]string, 1<<20)
	for i := range keys {
		keys[i] = IPKey(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}))
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		l.Allow(keys[i&(len(keys)-1)], t0)
		i++
	}
}
