package main

import (
	"context"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// userFunc runs one user's part of a phase; intended is when it should have started.
type userFunc func(ctx context.Context, p *phase, u int, intended time.Time)

// closedLoop runs fn for users lo..hi-1 on conc clients, each starting its next user as soon as
// the previous one is done.
func (b *bench) closedLoop(ctx context.Context, p *phase, lo, hi, conc int, fn userFunc) {
	eachUser(ctx, lo, hi, conc, func(u int) bool {
		fn(ctx, p, u, time.Now())
		return true
	})
}

// openLoop starts user lo+i at t0 + i/rate whatever the answers (rate 0: every user at t0), with
// at most inflight users running at once. A user that could not start on time is charged the
// delay: its latency runs from its intended start, so a slow gateway cannot hide behind a slow
// client (coordinated omission).
func (b *bench) openLoop(ctx context.Context, p *phase, lo, hi int, t0 time.Time, rate float64, inflight int, fn userFunc) {
	eachUser(ctx, lo, hi, inflight, func(u int) bool {
		intended := t0
		if rate > 0 {
			intended = t0.Add(time.Duration(float64(u-lo) / rate * float64(time.Second)))
		}
		if !sleep(ctx, time.Until(intended)) {
			return false
		}
		fn(ctx, p, u, intended)
		return true
	})
}

// eachUser hands users lo..hi-1 out to up to conc goroutines, each taking the next user once its
// previous one is done, until the users run out, ctx is done or one's run returns false.
func eachUser(ctx context.Context, lo, hi, conc int, run func(u int) bool) {
	var next atomic.Int64
	next.Store(int64(lo))
	var wg sync.WaitGroup
	for w := 0; w < min(conc, hi-lo); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				u := int(next.Add(1) - 1)
				if u >= hi || !run(u) {
					return
				}
			}
		}()
	}
	wg.Wait()
}

// timed runs one target's part of a phase and charges it its wall and CPU time. A selling
// sub-phase is charged the time from the start to the end of its last user in this part.
func (b *bench) timed(p *phase, t target, run func()) {
	b.setActive(p, t)
	if p.selling != nil {
		p.selling.targets[t].lastEnd.Store(0)
	}
	s0 := b.watch.sample()
	run()
	s1 := b.watch.sample()
	ts := p.targets[t]
	ts.cpu.add(s0, s1)
	ts.active.Add(int64(s1.at.Sub(s0.at)))
	if p.selling != nil {
		if end := p.selling.targets[t].lastEnd.Load(); end > 0 {
			p.selling.targets[t].active.Add(end - int64(s0.at.Sub(b.rec.start)))
		}
	}
}

// paired runs users 0..n-1 in chunks, each chunk first against the gateway and then, replayed,
// against respond: both targets see the machine in the same state, which on a shared machine
// matters more than anything else. Only a burst's press cannot be split (everyone presses at
// once), and runs whole, one target after the other.
func (b *bench) paired(ctx context.Context, p *phase, n, chunk int, run func(t target, lo, hi int)) {
	for lo := 0; lo < n && ctx.Err() == nil; lo += chunk {
		hi := min(lo+chunk, n)
		for t := gateway; t < nTargets && ctx.Err() == nil; t++ {
			b.timed(p, t, func() { run(t, lo, hi) })
		}
	}
}

// chunk is the number of users per paired part: about two slices' worth.
func (b *bench) chunk() int {
	if b.cfg.scenario == "open" {
		return max(1, int(b.cfg.rate*2*b.cfg.slice.Seconds()))
	}
	return 32 * b.cfg.concurrency
}

// startPhase begins a phase and resets the progress counters.
func (b *bench) startPhase(name string) *phase {
	for t := range b.done {
		b.done[t].Store(0)
	}
	return b.rec.begin(name)
}

// sale runs the scenario's sale: every user's flow against the gateway, and the same requests
// against respond.
func (b *bench) sale(ctx context.Context) error {
	if b.cfg.scenario == "burst" {
		return b.burst(ctx)
	}
	p := b.startPhase("sale")
	p.selling = b.rec.subPhase(p, "selling")
	b.opened.Store(int64(time.Since(b.rec.start)))
	b.prof.cpu(ctx, "sale", b.cfg.pprofD)
	b.paired(ctx, p, b.users.n, b.chunk(), func(t target, lo, hi int) {
		fn := b.fullFlow
		if t == baseline {
			fn = b.fullReplay
		}
		if b.cfg.scenario == "open" {
			b.openLoop(ctx, p, lo, hi, time.Now(), b.cfg.rate, b.cfg.maxInflight, fn)
		} else {
			b.closedLoop(ctx, p, lo, hi, b.cfg.concurrency, fn)
		}
	})
	return ctx.Err()
}

// burst: every user first loads the page and gets its path (before the start), then every user
// presses buy at the start instant. The press latency runs from that instant for everyone.
func (b *bench) burst(ctx context.Context) error {
	n := b.users.n
	p := b.startPhase("reveal")
	b.paired(ctx, p, n, b.chunk(), func(t target, lo, hi int) {
		b.closedLoop(ctx, p, lo, hi, b.cfg.concurrency, func(ctx context.Context, p *phase, u int, at time.Time) {
			if t == gateway {
				b.reveal(ctx, p, u, at)
			} else {
				b.revealReplay(ctx, p, u, at)
			}
			b.done[t].Add(1)
		})
	})
	if err := ctx.Err(); err != nil {
		return err
	}
	t0, err := b.startInstant(ctx)
	if err != nil {
		return err
	}
	if !sleep(ctx, time.Until(t0)) {
		return ctx.Err()
	}
	q := b.startPhase("burst")
	b.opened.Store(int64(t0.Sub(b.rec.start)))
	b.prof.cpu(ctx, "burst", b.cfg.pprofD)
	b.timed(q, gateway, func() { b.openLoop(ctx, q, 0, n, t0, 0, b.cfg.maxInflight, b.burstPress) })

	t1 := time.Now().Add(200 * time.Millisecond)
	if !sleep(ctx, time.Until(t1)) {
		return ctx.Err()
	}
	b.rec.mark("burst / respond")
	b.timed(q, baseline, func() {
		b.openLoop(ctx, q, 0, n, t1, 0, b.cfg.maxInflight, func(ctx context.Context, p *phase, u int, at time.Time) {
			b.pressReplay(ctx, p, u, at, at)
			b.done[baseline].Add(1)
		})
	})
	return ctx.Err()
}

// burstPress is one user's press at the start instant.
func (b *bench) burstPress(ctx context.Context, p *phase, u int, at time.Time) {
	if b.users.paths[u] != "" {
		b.press(ctx, p, u, at, at)
	}
	b.done[gateway].Add(1)
}

// soak keeps pressing buy after the sell-out, closed loop, alternating between the gateway and
// respond every slice so that both see the same machine, the same noise and the same moment.
// Presses carry no Idempotency-Key: each one is a new attempt, so any 202 here is a real sale.
func (b *bench) soak(ctx context.Context) {
	if b.cfg.soak <= 0 {
		return
	}
	p := b.startPhase("soak")
	b.prof.cpu(ctx, "soak", b.cfg.soak) // both targets alternate: the sold-out path and respond
	var cur atomic.Int32                // the target being driven
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < b.cfg.concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
			for {
				select {
				case <-stop:
					return
				default:
				}
				if ctx.Err() != nil {
					return
				}
				b.soakPress(ctx, p, target(cur.Load()), rng.IntN(b.users.n))
			}
		}()
	}
	// An even number of slices, so that both targets get the same time.
	slices := int((b.cfg.soak + b.cfg.slice - 1) / b.cfg.slice)
	slices += slices % 2
	t := gateway
	b.setActive(p, t)
	s0 := b.watch.sample()
	charge := func() {
		s1 := b.watch.sample()
		p.targets[t].cpu.add(s0, s1)
		p.targets[t].active.Add(int64(s1.at.Sub(s0.at)))
		s0 = s1
	}
	for i := 1; i < slices && ctx.Err() == nil; i++ {
		sleep(ctx, b.cfg.slice)
		charge()
		t = 1 - t
		cur.Store(int32(t))
		b.setActive(p, t)
	}
	// The last slice ends when the presses in flight are answered: they count, so does their time.
	sleep(ctx, b.cfg.slice)
	close(stop)
	wg.Wait()
	charge()
}

// soakPress is one press after the sell-out, by user u.
func (b *bench) soakPress(ctx context.Context, p *phase, t target, u int) {
	us := b.users
	path := us.paths[u]
	if path == "" {
		// Users refused at the path call never got one. Their press still goes through every layer
		// before the hash check; the sold-out flag answers first.
		path = b.statusPath(u) + "/buy/" + strings.Repeat("A", 43)
	}
	r := request{method: http.MethodPost, path: path, user: u, auth: us.auth[u]}
	if t == baseline {
		r.path = b.cfg.baselinePath + path
	}
	start := time.Now()
	a := b.cl.do(ctx, r)
	lat := time.Since(start)
	if ctx.Err() != nil {
		return // cut short by the end of the run, not an answer
	}
	if t == baseline && a.Err == nil {
		a.Code = "respond"
	}
	b.rec.record(p, t, callBuy, a.Status, a.codeWord(), lat, !expected(t, callBuy, &a))
	if t == gateway && a.Status == http.StatusAccepted {
		us.addExtraWin(u, a.ReservationID)
	}
}
