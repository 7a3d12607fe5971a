package main

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// target is where a request goes: the seckill handler or the plain respond route that serves as
// the yardstick, in the same Caddy process.
type target int

const (
	gateway target = iota
	baseline
	nTargets
)

func (t target) String() string {
	if t == baseline {
		return "respond"
	}
	return "seckill"
}

// callKind is one call of a user's flow. Two kinds are not requests: flow is the time from a
// user's intended arrival (or press, in a burst) to the buy answer, and order the time from a win
// to the result showing its order.
type callKind int

const (
	callStatus callKind = iota
	callPath
	callBuy
	callResult
	callFlow
	callOrder
	nCalls
)

func (c callKind) String() string {
	switch c {
	case callStatus:
		return "status"
	case callPath:
		return "path"
	case callBuy:
		return "buy"
	case callResult:
		return "result"
	case callFlow:
		return "flow"
	case callOrder:
		return "win→order"
	}
	return "unknown"
}

// answerKey identifies one kind of answer: the call, the HTTP status (0: no answer) and the code.
type answerKey struct {
	Call   callKind
	Status int
	Code   string
}

// targetStats are the figures of one target within one phase.
type targetStats struct {
	calls    [nCalls]*Histogram
	all      *Histogram // every request, whatever the call
	requests atomic.Int64
	errors   atomic.Int64
	active   atomic.Int64 // nanoseconds during which this target was being driven

	answers sync.Map // answerKey → *atomic.Int64

	cpu procDelta // gateway (and helpers') CPU while this target was driven

	lastEnd atomic.Int64 // a sub-phase: when its last user finished, in ns since the run's start
}

// noteEnd records that one of the sub-phase's users finished at ns since the run's start.
func (s *targetStats) noteEnd(ns int64) {
	for {
		old := s.lastEnd.Load()
		if ns <= old || s.lastEnd.CompareAndSwap(old, ns) {
			return
		}
	}
}

func newTargetStats() *targetStats {
	s := &targetStats{all: NewHistogram(7)}
	for i := range s.calls {
		s.calls[i] = NewHistogram(7)
	}
	return s
}

// phase is one measured stretch of a run (e.g. the sale, or the soak after the sell-out).
type phase struct {
	name    string
	targets [nTargets]*targetStats

	// selling is the sale's sub-phase of the users who arrived while stock remained: the buy
	// path proper, where admissions happen. A user's flow runs with a copy of the phase whose
	// also points to it, so that its requests count in both.
	selling *phase
	also    *phase
}

func newPhase(name string) *phase {
	p := &phase{name: name}
	for i := range p.targets {
		p.targets[i] = newTargetStats()
	}
	return p
}

// subPhase adds a phase whose figures are a subset of p's.
func (r *recorder) subPhase(p *phase, name string) *phase {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, q := range r.phases {
		if q.name == name {
			return q
		}
	}
	q := newPhase(name)
	r.phases = append(r.phases, q)
	return q
}

// mark notes a labelled instant (e.g. the soak switching targets) for the chart.
func (r *recorder) mark(label string) {
	r.mu.Lock()
	r.marks = append(r.marks, mark{At: time.Since(r.start), Label: label})
	r.mu.Unlock()
}

// window is one slot of the latency-over-time series.
type window struct {
	lat      [nTargets]*Histogram
	requests [nTargets]atomic.Int64
	errors   [nTargets]atomic.Int64
}

// recorder collects every measurement of a run. It is shared by all workers.
type recorder struct {
	start      time.Time
	windowSize time.Duration

	mu      sync.Mutex // guards growing windows, phases and marks
	windows atomic.Pointer[[]*window]
	phases  []*phase
	marks   []mark // phase boundaries, for the chart

	cur atomic.Pointer[phase]
}

// mark is a labelled instant of the run.
type mark struct {
	At    time.Duration
	Label string
}

func newRecorder(windowSize time.Duration) *recorder {
	return &recorder{start: time.Now(), windowSize: windowSize}
}

// begin starts a new phase (or returns the one of that name) and marks it on the chart.
func (r *recorder) begin(name string) *phase {
	r.mu.Lock()
	defer r.mu.Unlock()
	var p *phase
	for _, q := range r.phases {
		if q.name == name {
			p = q
		}
	}
	if p == nil {
		p = newPhase(name)
		r.phases = append(r.phases, p)
	}
	r.marks = append(r.marks, mark{At: time.Since(r.start), Label: name})
	r.cur.Store(p)
	return p
}

func (r *recorder) windowAt(at time.Time) *window {
	i := int(at.Sub(r.start) / r.windowSize)
	if i < 0 {
		i = 0
	}
	if ws := r.windows.Load(); ws != nil && i < len(*ws) {
		return (*ws)[i]
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var ws []*window
	if p := r.windows.Load(); p != nil {
		ws = *p
	}
	if i < len(ws) {
		return ws[i]
	}
	grown := make([]*window, len(ws), i+16)
	copy(grown, ws)
	for len(grown) < cap(grown) {
		w := &window{}
		for t := range w.lat {
			w.lat[t] = NewHistogram(5)
		}
		grown = append(grown, w)
	}
	r.windows.Store(&grown)
	return grown[i]
}

// windowList returns the windows recorded so far.
func (r *recorder) windowList() []*window {
	if p := r.windows.Load(); p != nil {
		return *p
	}
	return nil
}

// record adds one request's answer. lat runs from the intended send time.
func (r *recorder) record(p *phase, t target, c callKind, status int, code string, lat time.Duration, isErr bool) {
	for q := p; q != nil; q = q.also {
		s := q.targets[t]
		s.calls[c].Record(lat)
		s.all.Record(lat)
		s.requests.Add(1)
		if isErr {
			s.errors.Add(1)
		}
		s.countAnswer(answerKey{c, status, code})
	}
	w := r.windowAt(time.Now())
	w.lat[t].Record(lat)
	w.requests[t].Add(1)
	if isErr {
		w.errors[t].Add(1)
	}
}

// recordFlow adds a duration that is not one request (callFlow, callOrder).
func (r *recorder) recordFlow(p *phase, t target, c callKind, lat time.Duration) {
	for q := p; q != nil; q = q.also {
		q.targets[t].calls[c].Record(lat)
	}
}

func (s *targetStats) countAnswer(k answerKey) {
	v, ok := s.answers.Load(k)
	if !ok {
		v, _ = s.answers.LoadOrStore(k, new(atomic.Int64))
	}
	v.(*atomic.Int64).Add(1)
}

// answersSorted lists a target's answers, most frequent first.
func (s *targetStats) answersSorted() []answerCount {
	var out []answerCount
	s.answers.Range(func(k, v any) bool {
		out = append(out, answerCount{answerKey: k.(answerKey), N: v.(*atomic.Int64).Load()})
		return true
	})
	sort.Slice(out, func(i, j int) bool {
		if out[i].Call != out[j].Call {
			return out[i].Call < out[j].Call
		}
		return out[i].N > out[j].N
	})
	return out
}

// answerCount is how often one kind of answer came back.
type answerCount struct {
	answerKey
	N int64
}
