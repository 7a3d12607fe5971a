package caddymodule

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/jwtauth"
)

// metrics are the app's Prometheus metrics, registered on the configuration's registry (so they
// appear on Caddy's metrics endpoint). Labels are bounded: activity ids only once the activity is
// known (else ""), call kinds, and the stable answer words. Never a user, an IP or a token.
type metrics struct {
	requests  *prometheus.CounterVec   // by activity, call and answer code
	admission *prometheus.HistogramVec // store admission latency, by activity and outcome

	// rejected counts the public API's refusals by the funnel layer that made them. Its children
	// are resolved once, here: the layers are known, and every layer shows, at 0 until it refuses.
	rejectedVec *prometheus.CounterVec
	rejected    [nLayers]prometheus.Counter // nil at layerNone

	reconcileVec *prometheus.CounterVec // reconcile runs through the admin API, by result

	// The vectors' children, resolved once per label set: WithLabelValues on every request
	// hashes the labels and allocates.
	counters  children[requestLabels, prometheus.Counter]
	observers children[admissionLabels, prometheus.Observer]
}

type requestLabels struct {
	activity string
	kind     callKind
	code     string
}

type admissionLabels struct{ activity, outcome string }

// maxChildren bounds a children cache. The labels are bounded by design (activities, calls,
// answer words); past this many the vector is asked directly, so that a cache never grows
// without bound.
const maxChildren = 4096

// children caches the children of a metric vector by label set: a copy-on-write map, so that the
// request path reads it without a lock.
type children[K comparable, V any] struct {
	mu sync.Mutex // serialises writers
	m  atomic.Pointer[map[K]V]
}

// get returns the child for k, resolving it with resolve the first time.
func (c *children[K, V]) get(k K, resolve func() V) V {
	if p := c.m.Load(); p != nil {
		if v, ok := (*p)[k]; ok {
			return v
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var old map[K]V
	if p := c.m.Load(); p != nil {
		old = *p
	}
	if v, ok := old[k]; ok {
		return v
	}
	v := resolve()
	if len(old) >= maxChildren {
		return v
	}
	next := make(map[K]V, len(old)+1)
	for ok, ov := range old {
		next[ok] = ov
	}
	next[k] = v
	c.m.Store(&next)
	return v
}

const (
	metricsNamespace = "caddy"
	metricsSubsystem = "seckill"
)

// newMetrics creates the metrics and registers them, with the collectors of the activities, the
// breaker state and the JWKS refresh failures (verifier may be nil), on reg; and the store's own
// metrics when it has any (store local's commits, store redis's bucket transfers and WAITs).
func newMetrics(reg prometheus.Registerer, acts *activities, guard *admission.Guard, verifier *jwtauth.Verifier,
	store prometheus.Collector) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace,
			Subsystem: metricsSubsystem,
			Name:      "requests_total",
			Help:      "Calls of the public API, by activity, call and answer code.",
		}, []string{"activity", "call", "code"}),
		admission: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metricsNamespace,
			Subsystem: metricsSubsystem,
			Name:      "admission_duration_seconds",
			Help:      "Time the admission store took to decide, by activity and outcome.",
			Buckets:   []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}, []string{"activity", "outcome"}),
		rejectedVec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace,
			Subsystem: metricsSubsystem,
			Name:      "rejected_total",
			Help:      rejectedHelp(),
		}, []string{"layer"}),
	}
	for l := layerNone + 1; l < nLayers; l++ {
		m.rejected[l] = m.rejectedVec.WithLabelValues(l.String())
	}
	m.reconcileVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricsNamespace,
		Subsystem: metricsSubsystem,
		Name:      "reconcile_runs_total",
		Help: "Reconcile runs through this node's admin API (the reconcile command with store memory, or with store local while this Caddy holds the folder), by result: " +
			"ok, violated (an invariant does not hold) or error (could not check).",
	}, []string{"result"})
	for _, r := range []string{reconcileOK, reconcileViolated, reconcileError} {
		m.reconcileVec.WithLabelValues(r) // every result shows, at 0 until it happens
	}
	jwks := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: metricsNamespace,
		Subsystem: metricsSubsystem,
		Name:      "jwks_refresh_failures_total",
		Help:      "JWKS refreshes that failed (the last good key set stayed in use); 0 without a jwks url.",
	}, func() float64 { return float64(verifier.JWKSRefreshFailures()) })
	breaker := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: metricsNamespace,
		Subsystem: metricsSubsystem,
		Name:      "breaker_state",
		Help:      "State of the admission store's circuit breaker: 0 closed, 1 half-open, 2 open.",
	}, func() float64 { return breakerValue(guard.BreakerState()) })
	collectors := []prometheus.Collector{m.requests, m.admission, m.rejectedVec, breaker, jwks, m.reconcileVec, &activityCollector{acts: acts}}
	if store != nil {
		collectors = append(collectors, store)
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			var dup prometheus.AlreadyRegisteredError
			if errors.As(err, &dup) {
				continue // a second seckill app in one configuration cannot happen; be lenient
			}
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return m, nil
}

// rejectedHelp is the help text of rejected_total. It lists the layers in funnel order, cheapest
// first (the bench reads that order from it), and says where the admissions are counted: "admitted"
// is no refusal, so it is no layer of this counter.
func rejectedHelp() string {
	var b strings.Builder
	b.WriteString("Refusals of the public API by the funnel layer that made them; layers in funnel order: ")
	for l := layerNone + 1; l < nLayers; l++ {
		if l > layerNone+1 {
			b.WriteString(", ")
		}
		b.WriteString(l.String())
	}
	b.WriteString(`. Admitted buys are caddy_seckill_requests_total{call="buy",code="queued"}.`)
	return b.String()
}

func breakerValue(s gobreaker.State) float64 {
	switch s {
	case gobreaker.StateHalfOpen:
		return 1
	case gobreaker.StateOpen:
		return 2
	}
	return 0
}

// observeRequest counts one answered call.
func (m *metrics) observeRequest(activity string, kind callKind, code string) {
	if m == nil {
		return
	}
	m.counters.get(requestLabels{activity, kind, code}, func() prometheus.Counter {
		return m.requests.WithLabelValues(activity, kind.String(), code)
	}).Inc()
}

// The results of reconcile_runs_total.
const (
	reconcileOK       = "ok"
	reconcileViolated = "violated"
	reconcileError    = "error"
)

// observeReconcile counts one reconcile run through the admin API.
func (m *metrics) observeReconcile(ans ReconcileAnswer, err error) {
	if m == nil {
		return
	}
	r := reconcileOK
	switch {
	case err != nil:
		r = reconcileError
	case !ans.OK:
		r = reconcileViolated
	}
	m.reconcileVec.WithLabelValues(r).Inc()
}

// observeRejection counts one refusal at the layer that made it: a pre-resolved counter, so no
// lookup and no allocation. Refusals without a layer (layerNone) are not the public API's.
func (m *metrics) observeRejection(l layer) {
	if m == nil || l == layerNone {
		return
	}
	m.rejected[l].Inc()
}

// observeAdmission records one store decision.
func (m *metrics) observeAdmission(activity, outcome string, took time.Duration) {
	if m == nil {
		return
	}
	m.observers.get(admissionLabels{activity, outcome}, func() prometheus.Observer {
		return m.admission.WithLabelValues(activity, outcome)
	}).Observe(took.Seconds())
}

// activityCollector exports the node's view of each known activity: the remaining stock (last
// reading), the definition, the sold-out moment, and the store's queue counters as the periodic
// refresh (every 5 s) last read them. It reads the node's view, never the store, so a scrape
// costs nothing.
type activityCollector struct{ acts *activities }

func activityDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(metricsNamespace, metricsSubsystem, name), help, []string{"activity"}, nil)
}

var (
	remainingDesc = activityDesc("remaining", "Remaining stock of each activity, as last seen by this node.")
	stockDesc     = activityDesc("stock", "Total stock of each activity, as defined.")
	startDesc     = activityDesc("start_timestamp_seconds", "Start of each activity's window, Unix seconds.")
	soldOutDesc   = activityDesc("sold_out_timestamp_seconds",
		"When this node first saw the activity's stock at zero, Unix seconds; 0 while stock is left (a release resets it).")
	winsDesc = activityDesc("wins",
		"Wins ever appended to the activity's queue (the store's count, as this node last read it, every 5 s).")
	deadDesc = activityDesc("dead_letters",
		"Entries in the activity's dead-letter queue (the store's count, as this node last read it, every 5 s).")
)

// Describe implements prometheus.Collector.
func (c *activityCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{remainingDesc, stockDesc, startDesc, soldOutDesc, winsDesc, deadDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *activityCollector) Collect(ch chan<- prometheus.Metric) {
	unix := func(t time.Time) float64 {
		if t.IsZero() {
			return 0
		}
		return float64(t.UnixMilli()) / 1000
	}
	for _, v := range c.acts.views() {
		ch <- prometheus.MustNewConstMetric(remainingDesc, prometheus.GaugeValue, float64(v.remaining), v.id)
		ch <- prometheus.MustNewConstMetric(stockDesc, prometheus.GaugeValue, float64(v.stock), v.id)
		ch <- prometheus.MustNewConstMetric(startDesc, prometheus.GaugeValue, unix(v.start), v.id)
		ch <- prometheus.MustNewConstMetric(soldOutDesc, prometheus.GaugeValue, unix(v.soldOutAt), v.id)
		ch <- prometheus.MustNewConstMetric(winsDesc, prometheus.GaugeValue, float64(v.wins), v.id)
		ch <- prometheus.MustNewConstMetric(deadDesc, prometheus.GaugeValue, float64(v.deadWins), v.id)
	}
}
