package main

import (
	"fmt"
	"time"
)

// startProgress prints a progress line every second until the returned function is called.
func (b *bench) startProgress() (stop func()) {
	if b.cfg.quiet {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		prevReq := map[*targetStats]int64{} // a target's count when it was last reported
		prevCPU := b.watch.sample()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			st := b.active.Load()
			if st == nil {
				continue
			}
			ts := st.p.targets[st.t]
			req := ts.requests.Load()
			cpu := b.watch.sample()
			var d procDelta
			d.add(prevCPU, cpu)
			prevCPU = cpu
			users := fmt.Sprintf("users %7d/%d", b.done[st.t].Load(), b.users.n)
			if st.p.name == "soak" {
				users = fmt.Sprintf("presses %9d", req)
			}
			_, _ = fmt.Fprintf(b.out, "%6.1fs  %-6s %-7s  %s  %7.0f req/s  p99 %8s  wins %d/%d  errors %d  gateway %.2f cores, bench %.2f\n",
				time.Since(b.rec.start).Seconds(), st.p.name, st.t, users,
				float64(req-prevReq[ts])/d.Wall.Seconds(), fmtDur(b.recentP99(st.t)),
				b.wins.Load(), b.cfg.stock*int64(b.cfg.activities), ts.errors.Load(),
				cores(d.Gateway, d.Wall), cores(d.Bench, d.Wall))
			prevReq[ts] = req
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

// recentP99 is the 99th percentile of the target's requests over about the last second.
func (b *bench) recentP99(t target) time.Duration {
	ws := b.rec.windowList()
	i := int(time.Since(b.rec.start) / b.rec.windowSize)
	h := NewHistogram(5)
	for k := i - int(time.Second/b.rec.windowSize); k <= i; k++ {
		if k >= 0 && k < len(ws) {
			h.Merge(ws[k].lat[t])
		}
	}
	return h.Quantile(0.99)
}

// fmtDur prints a latency with three significant digits.
func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}
