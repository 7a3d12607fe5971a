package orderbackend

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Metrics counts what the backend did, for logs, the admin API and Prometheus collectors (see
// Counters). One Metrics is shared by a backend's consumers, sweeper and relay; the zero value is
// ready.
type Metrics struct {
	OrdersCreated atomic.Int64 // wins that became a new order
	Redelivered   atomic.Int64 // entries whose order already existed (a redelivery or a claim)
	DeadLettered  atomic.Int64 // entries moved to the dead-letter queue (poison or refused)
	Refused       atomic.Int64 // of which the database stock guard refused
	Paid          atomic.Int64 // orders paid
	Expired       atomic.Int64 // orders cancelled by the sweeper
	Cancelled     atomic.Int64 // orders cancelled by their owner
	Released      atomic.Int64 // reservations this process released in the store
	// ReleaseUnknown counts releases the store answered with an unknown reservation or
	// activity: nothing was given back and the release was dropped (Relay).
	ReleaseUnknown atomic.Int64
	Retries        atomic.Int64 // operations retried after a transient failure
	Batches        atomic.Int64 // read batches the consumers turned into orders (successful CreateOrders calls)
	BatchWins      atomic.Int64 // wins in those batches: BatchWins/Batches is the mean batch
	Refunds        atomic.Int64 // charges given back because they could not pay their order
	// PaymentErrors counts provider calls of the settlement that failed (a lookup of an attempt
	// without outcome, a refund due): a lookup is tried again SettleAfter later, a refund at the
	// next sweep, each after the attempts not tried yet.
	PaymentErrors atomic.Int64
	// Notifications counts the payment providers' notifications by provider and result or
	// reason (the order API's POST /orders/webhooks/{provider}).
	Notifications NotificationCounts
}

// MetricsSnapshot is a copy of the counters. The Tx fields are the repository's (TxStats, when it
// reports them), filled in by Backend.Metrics: its transactions that created orders, the
// CreateOrders calls and the wins they carried. With SQLite's group commit several batches share
// a transaction, so TxWins/Txs, the mean wins per transaction, is above BatchWins/Batches.
type MetricsSnapshot struct {
	OrdersCreated, Redelivered, DeadLettered, Refused int64
	Paid, Expired, Cancelled, Released, Retries       int64
	ReleaseUnknown                                    int64
	Batches, BatchWins                                int64
	Refunds, PaymentErrors                            int64
	Txs, TxCalls, TxWins                              int64
}

// Snapshot copies the counters (the Tx fields stay zero: they are the repository's).
func (m *Metrics) Snapshot() MetricsSnapshot {
	return MetricsSnapshot{
		OrdersCreated: m.OrdersCreated.Load(), Redelivered: m.Redelivered.Load(), DeadLettered: m.DeadLettered.Load(),
		Refused: m.Refused.Load(), Paid: m.Paid.Load(), Expired: m.Expired.Load(), Cancelled: m.Cancelled.Load(),
		Released: m.Released.Load(), ReleaseUnknown: m.ReleaseUnknown.Load(), Retries: m.Retries.Load(), Batches: m.Batches.Load(), BatchWins: m.BatchWins.Load(),
		Refunds: m.Refunds.Load(), PaymentErrors: m.PaymentErrors.Load(),
	}
}

// Counter is one of the backend's counters as monitoring exports it. The embedded backend's
// collector (caddymodule) and the standalone backend's metrics listener (cmd/orderbackend
// -metrics-listen) both build their metrics from Counters, so the two deployments export the same
// names and one dashboard serves both.
type Counter struct {
	Name  string                      // short name, e.g. "created"; see MetricName
	Help  string                      // the metric's help text
	Value func(MetricsSnapshot) int64 // reads the counter from a snapshot
}

// MetricName is the counter's Prometheus name, caddy_seckill_orders_<Name>_total. The standalone
// backend keeps the caddy_seckill_ prefix of the embedded one on purpose: same dashboards.
func (c Counter) MetricName() string { return "caddy_seckill_orders_" + c.Name + "_total" }

// Counters returns the backend's counters, in a fresh slice the caller may keep. They have no
// labels: no user, IP or token, and not even the activity (the backend counts per process).
func Counters() []Counter {
	return []Counter{
		{"created", "Wins that became a new order.",
			func(m MetricsSnapshot) int64 { return m.OrdersCreated }},
		{"redelivered", "Wins delivered again whose order already existed (harmless).",
			func(m MetricsSnapshot) int64 { return m.Redelivered }},
		{"dead_lettered", "Wins moved to the dead-letter queue (see the logs).",
			func(m MetricsSnapshot) int64 { return m.DeadLettered }},
		{"refused", "Dead-lettered wins the database stock guard refused (store and database disagree).",
			func(m MetricsSnapshot) int64 { return m.Refused }},
		{"paid", "Orders paid.",
			func(m MetricsSnapshot) int64 { return m.Paid }},
		{"expired", "Orders cancelled because their payment window closed.",
			func(m MetricsSnapshot) int64 { return m.Expired }},
		{"cancelled", "Orders cancelled by their owner.",
			func(m MetricsSnapshot) int64 { return m.Cancelled }},
		{"released", "Reservations given back to the store's stock.",
			func(m MetricsSnapshot) int64 { return m.Released }},
		{"release_unknown", "Releases the store answered with an unknown reservation or activity, dropped: nothing to give back (the activity deleted, or a win the store lost with its stock); see the logs and run reconcile.",
			func(m MetricsSnapshot) int64 { return m.ReleaseUnknown }},
		{"retries", "Operations retried after a transient database or store failure.",
			func(m MetricsSnapshot) int64 { return m.Retries }},
		{"refunds", "Charges refunded because they could not pay their order (a success after the window closed, or a second charge).",
			func(m MetricsSnapshot) int64 { return m.Refunds }},
		{"payment_errors", "Provider calls of the payment settlement that failed (a lookup of an attempt without outcome, a refund due); a lookup is retried a settle delay later, a refund at the next sweep, and until one succeeds a charge may stand without a paid order or a refund.",
			func(m MetricsSnapshot) int64 { return m.PaymentErrors }},
		// Batching, to watch what a transaction carries (README.md, "Batches").
		{"batches", "Read batches of wins the consumers turned into orders (one CreateOrders call each).",
			func(m MetricsSnapshot) int64 { return m.Batches }},
		{"batch_wins", "Wins in those batches: batch_wins / batches is the mean batch.",
			func(m MetricsSnapshot) int64 { return m.BatchWins }},
		{"transactions", "Database transactions that created orders (with SQLite, batches waiting for the writer share one).",
			func(m MetricsSnapshot) int64 { return m.Txs }},
		{"transaction_batches", "Batches those transactions answered: transaction_batches / transactions is the sharing.",
			func(m MetricsSnapshot) int64 { return m.TxCalls }},
		{"transaction_wins", "Wins those transactions carried: transaction_wins / transactions is the mean per commit.",
			func(m MetricsSnapshot) int64 { return m.TxWins }},
	}
}

// NewCollector exports the counters under their MetricName, read from snapshot on every scrape:
// the embedded backend in Caddy and the standalone one (cmd/orderbackend -metrics-listen) both
// use it, so that one dashboard serves both deployments.
func NewCollector(snapshot func() MetricsSnapshot) prometheus.Collector {
	c := &collector{snapshot: snapshot, counters: Counters()}
	for _, oc := range c.counters {
		c.descs = append(c.descs, prometheus.NewDesc(oc.MetricName(), oc.Help, nil, nil))
	}
	return c
}

type collector struct {
	snapshot func() MetricsSnapshot
	counters []Counter
	descs    []*prometheus.Desc
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	m := c.snapshot()
	for i, oc := range c.counters {
		ch <- prometheus.MustNewConstMetric(c.descs[i], prometheus.CounterValue, float64(oc.Value(m)))
	}
}

// defaultRuntime fills what every part of the backend takes and a caller may leave unset: the
// clock, the logger and the metrics.
func defaultRuntime(now *func() time.Time, log **zap.Logger, metrics **Metrics) {
	if *now == nil {
		*now = time.Now
	}
	if *log == nil {
		*log = zap.NewNop()
	}
	if *metrics == nil {
		*metrics = new(Metrics)
	}
}
