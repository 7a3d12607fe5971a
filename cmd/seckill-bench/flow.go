package main

import (
	"context"
	"net/http"
	"time"
)

// A user's flow, as the sale page runs it: read the status, ask for the buy path (captcha off:
// the body is {}), press buy on that path, then poll the result until the win shows.
//
// Every flow has a replay: the same requests, in the same order and with the same waits, sent to
// the respond route, so that each figure of the seckill handler has a yardstick.

// Outcomes of a user's flow, for the invariant checks.
const (
	outcomeNone    uint8 = iota // not run
	outcomeWon                  // 202
	outcomeLost                 // a definite refusal: sold_out or limit_reached
	outcomeGaveUp               // no definite answer before the buy (errors, rate limits)
	outcomeUnknown              // the buy got no answer even after retries: won or not, nobody knows
)

// emptyJSON is the path call's body with the captcha off.
const emptyJSON = "{}"

// expected reports whether an answer is one the contract allows for the call in a healthy sale:
// anything else counts as an error.
func expected(t target, c callKind, a *answer) bool {
	if a.Err != nil {
		return false
	}
	if t == baseline {
		return a.Status == http.StatusOK
	}
	switch c {
	case callPath:
		return a.Status == http.StatusOK || a.Status == http.StatusGone
	case callBuy:
		return a.Status == http.StatusAccepted || a.Status == http.StatusGone || a.Status == http.StatusConflict
	}
	return a.Status == http.StatusOK
}

// send sends one request of a flow and records it, retrying what a client retries (no answer,
// 429, 503) after the advertised wait. The first attempt's latency runs from intended, so a
// request that could not go out on time is charged its wait.
func (b *bench) send(ctx context.Context, p *phase, t target, c callKind, r request, intended time.Time) answer {
	for attempt := 0; ; attempt++ {
		from := time.Now()
		if attempt == 0 && intended.Before(from) {
			from = intended
		}
		a := b.cl.do(ctx, r)
		lat := time.Since(from)
		if t == baseline && a.Err == nil {
			a.Code = "respond"
		}
		b.rec.record(p, t, c, a.Status, a.codeWord(), lat, !expected(t, c, &a))
		retry := a.Err != nil || a.Status == http.StatusTooManyRequests || a.Status == http.StatusServiceUnavailable
		if !retry || attempt >= b.cfg.retries || ctx.Err() != nil {
			return a
		}
		wait := a.RetryAfter
		if wait <= 0 {
			wait = 100 * time.Millisecond << attempt
		}
		if !sleep(ctx, wait) {
			return a
		}
	}
}

// sleep waits d or until ctx is done; it reports whether the whole wait passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (b *bench) statusPath(u int) string {
	return b.cfg.prefix + "/" + b.users.acts[b.users.activityOf(u)]
}

// reveal is the first half of a flow: the status call and the path call. It reports whether the
// user got its buy path.
func (b *bench) reveal(ctx context.Context, p *phase, u int, intended time.Time) bool {
	us := b.users
	base := b.statusPath(u)
	a := b.send(ctx, p, gateway, callStatus, request{method: http.MethodGet, path: base, user: u}, intended)
	if a.Status != http.StatusOK {
		us.outcome[u] = outcomeGaveUp
		return false
	}
	us.script[u].path = true
	a = b.send(ctx, p, gateway, callPath, request{
		method: http.MethodPost, path: base + "/path", user: u, auth: us.auth[u], body: emptyJSON,
	}, time.Now())
	switch {
	case a.Status == http.StatusOK && a.Path != "":
		us.paths[u] = a.Path
		return true
	case a.Status == http.StatusGone:
		us.outcome[u] = outcomeLost
	default:
		us.outcome[u] = outcomeGaveUp
	}
	return false
}

// press is the second half: the buy on the user's path, then polling the result of a win.
// intended is when the user pressed; flowStart when its flow began (for the flow latency).
func (b *bench) press(ctx context.Context, p *phase, u int, intended, flowStart time.Time) {
	us := b.users
	us.script[u].buy = true
	a := b.send(ctx, p, gateway, callBuy, request{
		method: http.MethodPost, path: us.paths[u], user: u, auth: us.auth[u], idem: "bench-" + userID(u),
	}, intended)
	answered := time.Now()
	b.rec.recordFlow(p, gateway, callFlow, answered.Sub(flowStart))
	switch {
	case a.Status == http.StatusAccepted:
		us.outcome[u] = outcomeWon
		us.reservation[u] = a.ReservationID
		b.wins.Add(1)
		b.noteWin(us.activityOf(u), answered)
	case a.Status == http.StatusGone || a.Status == http.StatusConflict:
		us.outcome[u] = outcomeLost
		return
	case a.Err != nil:
		us.outcome[u] = outcomeUnknown
		return
	default:
		us.outcome[u] = outcomeGaveUp
		return
	}
	b.poll(ctx, p, u, answered)
}

// pollDelay is the wait before the k-th result poll: 20 ms, doubling, at most 1 s.
func pollDelay(k int) time.Duration {
	d := 20 * time.Millisecond
	for i := 0; i < k && d < time.Second; i++ {
		d *= 2
	}
	return min(d, time.Second)
}

// poll asks for the result of a win until it shows the reservation, settled: queued (the edge
// recorded it) without an order backend, an order state with one.
func (b *bench) poll(ctx context.Context, p *phase, u int, won time.Time) {
	us := b.users
	path := b.statusPath(u) + "/result"
	deadline := won.Add(b.cfg.pollTimeout)
	for k := 0; ; k++ {
		if !sleep(ctx, pollDelay(k)) {
			return
		}
		a := b.send(ctx, p, gateway, callResult, request{
			method: http.MethodGet, path: path, user: u, auth: us.auth[u],
		}, time.Now())
		us.script[u].polls++
		if a.Status == http.StatusOK && a.ReservationID == us.reservation[u] && b.settled(a.Code) {
			us.confirmed[u] = true
			if b.orders {
				b.rec.recordFlow(p, gateway, callOrder, time.Since(won))
			}
			return
		}
		if time.Now().After(deadline) {
			return
		}
	}
}

// settled reports whether a result code is the state a win should reach.
func (b *bench) settled(code string) bool {
	if !b.orders {
		return code != "" && code != "none"
	}
	switch code {
	case "pending_payment", "paid", "cancelled", "failed":
		return true
	}
	return false
}

// revealReplay sends user u's first half again, to the respond route.
func (b *bench) revealReplay(ctx context.Context, p *phase, u int, intended time.Time) {
	base := b.cfg.baselinePath + b.statusPath(u)
	b.send(ctx, p, baseline, callStatus, request{method: http.MethodGet, path: base, user: u}, intended)
	if b.users.script[u].path {
		b.send(ctx, p, baseline, callPath, request{
			method: http.MethodPost, path: base + "/path", user: u, auth: b.users.auth[u], body: emptyJSON,
		}, time.Now())
	}
}

// pressReplay sends user u's second half again, to the respond route, with the same waits.
func (b *bench) pressReplay(ctx context.Context, p *phase, u int, intended, flowStart time.Time) {
	us := b.users
	if !us.script[u].buy {
		return
	}
	b.send(ctx, p, baseline, callBuy, request{
		method: http.MethodPost, path: b.cfg.baselinePath + us.paths[u], user: u, auth: us.auth[u], idem: "bench-" + userID(u),
	}, intended)
	b.rec.recordFlow(p, baseline, callFlow, time.Since(flowStart))
	path := b.cfg.baselinePath + b.statusPath(u) + "/result"
	for k := 0; k < int(us.script[u].polls); k++ {
		if !sleep(ctx, pollDelay(k)) {
			return
		}
		b.send(ctx, p, baseline, callResult, request{method: http.MethodGet, path: path, user: u, auth: us.auth[u]}, time.Now())
	}
}

// fullFlow runs a whole flow against the gateway: reveal, then press at once. A user arriving
// while stock remains counts in the selling sub-phase too.
func (b *bench) fullFlow(ctx context.Context, p *phase, u int, intended time.Time) {
	if p.selling != nil && b.wins.Load() < b.cfg.stock*int64(b.cfg.activities) {
		b.users.script[u].selling = true
		q := *p
		q.also, p = p.selling, &q
	}
	if b.reveal(ctx, p, u, intended) {
		b.press(ctx, p, u, time.Now(), intended)
	}
	if p.also != nil {
		p.also.targets[gateway].noteEnd(int64(time.Since(b.rec.start)))
	}
	b.done[gateway].Add(1)
}

// fullReplay runs a whole flow's replay; a user of the selling sub-phase counts in it again.
func (b *bench) fullReplay(ctx context.Context, p *phase, u int, intended time.Time) {
	if p.selling != nil && b.users.script[u].selling {
		q := *p
		q.also, p = p.selling, &q
	}
	b.revealReplay(ctx, p, u, intended)
	b.pressReplay(ctx, p, u, time.Now(), intended)
	if p.also != nil {
		p.also.targets[baseline].noteEnd(int64(time.Since(b.rec.start)))
	}
	b.done[baseline].Add(1)
}
