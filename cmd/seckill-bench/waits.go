package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/exp/trace"
)

// `seckill-bench waits FILE` reads an execution trace of the gateway (-pprof DIR -trace saves one
// of the sale and of the soak) and tells where its goroutines waited: for Redis's reply, for a
// connection of the Redis pool, for the admission batch, for the next request; and, once
// something made them runnable, how long they queued for a processor. A CPU profile shows where
// the gateway spends its CPU; a missed latency goal is mostly time spent not running, which only
// the trace shows.

// waitKind names what a goroutine waited for, from the stack it blocked with.
type waitKind string

const (
	waitAdmitReply  waitKind = "redis reply: admission script"
	waitRedisReply  waitKind = "redis reply: other commands"
	waitRedisPool   waitKind = "redis pool: a free connection"
	waitAdmitBatch  waitKind = "buyer: its admission batch"
	waitNextRequest waitKind = "http: the next request"
	waitBackground  waitKind = "http: background read (watches for a closed connection)"
	waitEndRequest  waitKind = "http: end of request (stops that read)"
	waitHTTPOther   waitKind = "http: other"
	waitOther       waitKind = "other"
)

// classifyWait names a blocking stack. Frames are innermost first.
func classifyWait(funcs []string) waitKind {
	has := func(s string) bool {
		return slices.ContainsFunc(funcs, func(f string) bool { return strings.Contains(f, s) })
	}
	switch {
	case has("pool.(*ConnPool).waitTurn") || has("pool.(*ConnPool).Get"):
		return waitRedisPool
	case has("redisstore.(*Store).runAdmit"):
		return waitAdmitReply
	case has("github.com/redis/go-redis/"):
		return waitRedisReply
	case has("redisstore.(*admitGroups).admit"):
		return waitAdmitBatch
	case has("net/http.(*connReader).backgroundRead"):
		return waitBackground
	case has("net/http.(*connReader).abortPendingRead"):
		return waitEndRequest
	case has("net/http.(*conn).readRequest") || has("net/http.(*conn).serve") && has("bufio.(*Reader).Peek"):
		return waitNextRequest // on a kept-alive connection, most of it is the client's own time
	case has("net/http.(*conn).serve"):
		return waitHTTPOther
	}
	return waitOther
}

// waitReport sums a trace's waits.
type waitReport struct {
	Span    time.Duration
	Blocked map[waitKind]*Histogram // blocked → made runnable
	Queued  map[string]*Histogram   // runnable → running, by what made it runnable
	// ProcsRunning[n] is how long exactly n Ps were running goroutines.
	ProcsRunning map[int]time.Duration
}

// readWaits reads a trace written by runtime/trace (Go 1.22 or later).
func readWaits(r io.Reader) (*waitReport, error) {
	tr, err := trace.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("read trace: %w", err)
	}
	rep := &waitReport{Blocked: map[waitKind]*Histogram{}, Queued: map[string]*Histogram{}, ProcsRunning: map[int]time.Duration{}}
	type gState struct {
		blockedAt, readyAt trace.Time
		blockedFor         waitKind
		readyBy            string
	}
	gs := map[trace.GoID]*gState{}
	var first, last, procsAt trace.Time
	running := 0
	for {
		ev, err := tr.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read trace: %w", err)
		}
		now := ev.Time()
		if first == 0 {
			first = now
		}
		last = now
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		switch st.Resource.Kind {
		case trace.ResourceProc:
			from, to := st.Proc()
			if procsAt != 0 {
				rep.ProcsRunning[running] += time.Duration(now - procsAt)
			}
			procsAt = now
			switch {
			case from != trace.ProcRunning && to == trace.ProcRunning:
				running++
			case from == trace.ProcRunning && to != trace.ProcRunning && running > 0:
				running--
			}
			continue
		case trace.ResourceGoroutine:
		default:
			continue
		}
		id := st.Resource.Goroutine()
		g := gs[id]
		if g == nil {
			g = &gState{}
			gs[id] = g
		}
		from, to := st.Goroutine()
		switch {
		case from == trace.GoRunning && to == trace.GoWaiting:
			g.blockedAt, g.blockedFor = now, classifyWait(stackFuncs(st.Stack))
		case from == trace.GoWaiting && to == trace.GoRunnable:
			if g.blockedAt != 0 {
				histOf(rep.Blocked, g.blockedFor).Record(time.Duration(now - g.blockedAt))
				g.readyAt, g.readyBy = now, "after "+string(g.blockedFor)
			}
			g.blockedAt = 0
		case from == trace.GoRunning && to == trace.GoRunnable:
			g.readyAt, g.readyBy, g.blockedAt = now, "preempted or yielded", 0
		case from == trace.GoNotExist && to == trace.GoRunnable:
			g.readyAt, g.readyBy = now, "new goroutine"
		case from == trace.GoSyscall && to == trace.GoRunnable:
			// Back from a system call that outlasted its P: it queues like any other.
			g.readyAt, g.readyBy, g.blockedAt = now, "after a system call (lost its P)", 0
		case from == trace.GoRunnable && to == trace.GoRunning:
			if g.readyAt != 0 {
				histOf(rep.Queued, g.readyBy).Record(time.Duration(now - g.readyAt))
			}
			g.readyAt = 0
		}
	}
	if procsAt != 0 {
		rep.ProcsRunning[running] += time.Duration(last - procsAt)
	}
	rep.Span = time.Duration(last - first)
	return rep, nil
}

// histOf returns m[k], made on first use.
func histOf[K comparable](m map[K]*Histogram, k K) *Histogram {
	if m[k] == nil {
		m[k] = NewHistogram(5)
	}
	return m[k]
}

func stackFuncs(s trace.Stack) []string {
	var fs []string
	for f := range s.Frames() {
		fs = append(fs, f.Func)
	}
	return fs
}

// print writes the report's tables.
func (rep *waitReport) print(w io.Writer) {
	_, _ = fmt.Fprintf(w, "trace of %.1f s\n\nwaiting for (blocked → runnable)\n", rep.Span.Seconds())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprintln(tw, "what\tcount\tmean\tp50\tp99\tmax\t")
	kinds := []waitKind{waitAdmitBatch, waitAdmitReply, waitRedisPool, waitRedisReply, waitNextRequest, waitBackground, waitEndRequest, waitHTTPOther, waitOther}
	for _, k := range kinds {
		if h := rep.Blocked[k]; h != nil {
			printWaitRow(tw, string(k), h)
		}
	}
	_ = tw.Flush()

	_, _ = fmt.Fprintln(w, "\nqueued for a processor (runnable → running), by what made the goroutine runnable")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprintln(tw, "made runnable\tcount\tmean\tp50\tp99\tmax\t")
	for _, k := range slices.Sorted(maps.Keys(rep.Queued)) {
		printWaitRow(tw, k, rep.Queued[k])
	}
	_ = tw.Flush()

	var total time.Duration
	for _, d := range rep.ProcsRunning {
		total += d
	}
	if total > 0 {
		_, _ = fmt.Fprint(w, "\nprocessors (Ps) running goroutines, share of the time:")
		for _, n := range slices.Sorted(maps.Keys(rep.ProcsRunning)) {
			_, _ = fmt.Fprintf(w, " %d: %.0f%%", n, 100*float64(rep.ProcsRunning[n])/float64(total))
		}
		_, _ = fmt.Fprintln(w, "\n(a P counts as running while its goroutine runs or is in a system call, and while the kernel has")
		_, _ = fmt.Fprintln(w, " descheduled its thread: compare with the process's CPU time to see how much was spent waiting for a core)")
	}
}

func printWaitRow(w io.Writer, name string, h *Histogram) {
	d := func(d time.Duration) string {
		if d < time.Microsecond {
			return "<1µs" // the histogram counts whole microseconds
		}
		return fmtDur(d)
	}
	_, _ = fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\t\n", name, h.Count(),
		d(h.Mean()), d(h.Quantile(0.5)), d(h.Quantile(0.99)), d(h.Max()))
}

// waits is the `seckill-bench waits FILE...` subcommand.
func waits(files []string, stdout, stderr io.Writer) int {
	if len(files) == 0 {
		_, _ = fmt.Fprintln(stderr, "usage: seckill-bench waits TRACE-FILE... (saved by -pprof DIR -trace, or any runtime/trace file)")
		return exitUsage
	}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			_, _ = fmt.Fprintln(stderr, "seckill-bench:", err)
			return exitError
		}
		rep, err := readWaits(f)
		_ = f.Close()
		if err != nil {
			_, _ = fmt.Fprintf(stderr, "seckill-bench: %s: %v\n", name, err)
			return exitError
		}
		_, _ = fmt.Fprintf(stdout, "== %s: ", name)
		rep.print(stdout)
	}
	return exitOK
}
