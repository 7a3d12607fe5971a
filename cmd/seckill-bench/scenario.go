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

// closedLoop runs fn for users 0..n-1 on conc clients, each starting its next user as soon as the
// previous one is done.
func (b *bench) closedLoop(ctx context.Context, p *phase, n, conc int, fn userFunc) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				u := int(next.Add(1) - 1)
				if u >= n {
					return
				}
				fn(ctx, p, u, time.Now())
			}
		}()
	}
	wg.Wait()
}

// openLoop starts user i at t0 + i/rate whatever the answers (rate 0: every user at t0), with at
// most inflight users running at once. A user that could not start on time is charged the delay:
// its latency runs from its intended start, so a slow gateway cannot hide behind a slow client
// (coordinated omission).
func (b *bench) openLoop(ctx context.Context, p *phase, n int, t0 time.Time, rate float64, inflight int, fn userFunc) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < min(inflight, n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				u := int(next.Add(1) - 1)
				if u >= n {
					return
				}
				intended := t0
				if rate > 0 {
					intended = t0.Add(time.Duration(float64(u) / rate * float64(time.Second)))
				}
				if !sleep(ctx, time.Until(intended)) {
					return
				}
				fn(ctx, p, u, intended)
			}
		}()
	}
	wg.Wait()
}

// timed runs one target's part of a phase and charges it its wall and CPU time.
func (b *bench) timed(p *phase, t target, run func()) {
	b.done.Store(0)
	b.setActive(p, t)
	s0 := b.watch.sample()
	run()
	s1 := b.watch.sample()
	ts := p.targets[t]
	ts.cpu.add(s0, s1)
	ts.active.Add(int64(s1.at.Sub(s0.at)))
}

// sale runs the scenario's sale against the gateway, then the same requests against respond.
func (b *bench) sale(ctx context.Context) error {
	n := b.users.n
	switch b.cfg.scenario {
	case "closed":
		p := b.rec.begin("sale", gateway)
		b.opened.Store(int64(time.Since(b.rec.start)))
		b.timed(p, gateway, func() { b.closedLoop(ctx, p, n, b.cfg.concurrency, b.fullFlow) })
		b.rec.begin("sale", baseline)
		b.timed(p, baseline, func() { b.closedLoop(ctx, p, n, b.cfg.concurrency, b.fullReplay) })
	case "open":
		p := b.rec.begin("sale", gateway)
		b.opened.Store(int64(time.Since(b.rec.start)))
		b.timed(p, gateway, func() { b.openLoop(ctx, p, n, time.Now(), b.cfg.rate, b.cfg.maxInflight, b.fullFlow) })
		b.rec.begin("sale", baseline)
		b.timed(p, baseline, func() { b.openLoop(ctx, p, n, time.Now(), b.cfg.rate, b.cfg.maxInflight, b.fullReplay) })
	case "burst":
		return b.burst(ctx)
	}
	return ctx.Err()
}

// burst: every user first loads the page and gets its path (before the start), then every user
// presses buy at the start instant. The press latency runs from that instant for everyone.
func (b *bench) burst(ctx context.Context) error {
	n := b.users.n
	p := b.rec.begin("reveal", gateway)
	b.timed(p, gateway, func() {
		b.closedLoop(ctx, p, n, b.cfg.concurrency, func(ctx context.Context, p *phase, u int, at time.Time) {
			b.reveal(ctx, p, u, at)
			b.done.Add(1)
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
	q := b.rec.begin("burst", gateway)
	b.opened.Store(int64(t0.Sub(b.rec.start)))
	b.timed(q, gateway, func() { b.openLoop(ctx, q, n, t0, 0, b.cfg.maxInflight, b.burstPress) })

	b.rec.begin("reveal", baseline)
	b.timed(p, baseline, func() {
		b.closedLoop(ctx, p, n, b.cfg.concurrency, func(ctx context.Context, p *phase, u int, at time.Time) {
			b.revealReplay(ctx, p, u, at)
			b.done.Add(1)
		})
	})
	t1 := time.Now().Add(200 * time.Millisecond)
	sleep(ctx, time.Until(t1))
	b.rec.begin("burst", baseline)
	b.timed(q, baseline, func() {
		b.openLoop(ctx, q, n, t1, 0, b.cfg.maxInflight, func(ctx context.Context, p *phase, u int, at time.Time) {
			b.pressReplay(ctx, p, u, at, at)
			b.done.Add(1)
		})
	})
	return ctx.Err()
}

// burstPress is one user's press at the start instant.
func (b *bench) burstPress(ctx context.Context, p *phase, u int, at time.Time) {
	if b.users.paths[u] != "" {
		b.press(ctx, p, u, at, at)
	}
	b.done.Add(1)
}

// soak keeps pressing buy after the sell-out, closed loop, alternating between the gateway and
// respond every slice so that both see the same machine, the same noise and the same moment.
// Presses carry no Idempotency-Key: each one is a new attempt, so any 202 here is a real sale.
func (b *bench) soak(ctx context.Context) {
	if b.cfg.soak <= 0 {
		return
	}
	p := b.rec.begin("soak", gateway)
	var cur atomic.Int32 // the target being driven
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
	for i := 0; i < slices && ctx.Err() == nil; i++ {
		sleep(ctx, b.cfg.slice)
		s1 := b.watch.sample()
		p.targets[t].cpu.add(s0, s1)
		p.targets[t].active.Add(int64(s1.at.Sub(s0.at)))
		s0 = s1
		t = 1 - t
		cur.Store(int32(t))
		b.setActive(p, t)
	}
	close(stop)
	wg.Wait()
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
