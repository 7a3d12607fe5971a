package caddymodule

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

// ordersCounter is one counter of the embedded order backend, exported as
// caddy_seckill_orders_<name>_total.
type ordersCounter struct {
	desc  *prometheus.Desc
	value func(orderbackend.MetricsSnapshot) int64
}

func newOrdersCounter(name, help string, value func(orderbackend.MetricsSnapshot) int64) ordersCounter {
	return ordersCounter{
		desc:  prometheus.NewDesc(prometheus.BuildFQName(metricsNamespace, metricsSubsystem, "orders_"+name+"_total"), help, nil, nil),
		value: value,
	}
}

// ordersCounters are the backend's counters. They have no labels: no user, IP or token, and not
// even the activity (the backend counts per process).
var ordersCounters = []ordersCounter{
	newOrdersCounter("created", "Wins that became a new order.",
		func(m orderbackend.MetricsSnapshot) int64 { return m.OrdersCreated }),
	newOrdersCounter("redelivered", "Wins delivered again whose order already existed (harmless).",
		func(m orderbackend.MetricsSnapshot) int64 { return m.Redelivered }),
	newOrdersCounter("dead_lettered", "Wins moved to the dead-letter queue (see the logs).",
		func(m orderbackend.MetricsSnapshot) int64 { return m.DeadLettered }),
	newOrdersCounter("refused", "Dead-lettered wins the database stock guard refused (store and database disagree).",
		func(m orderbackend.MetricsSnapshot) int64 { return m.Refused }),
	newOrdersCounter("paid", "Orders paid.",
		func(m orderbackend.MetricsSnapshot) int64 { return m.Paid }),
	newOrdersCounter("expired", "Orders cancelled because their payment window closed.",
		func(m orderbackend.MetricsSnapshot) int64 { return m.Expired }),
	newOrdersCounter("cancelled", "Orders cancelled by their owner.",
		func(m orderbackend.MetricsSnapshot) int64 { return m.Cancelled }),
	newOrdersCounter("released", "Reservations given back to the store's stock.",
		func(m orderbackend.MetricsSnapshot) int64 { return m.Released }),
	newOrdersCounter("retries", "Operations retried after a transient database or store failure.",
		func(m orderbackend.MetricsSnapshot) int64 { return m.Retries }),
	// Batching, to watch what a transaction carries (orderbackend/README.md, "Batches").
	newOrdersCounter("batches", "Read batches of wins the consumers turned into orders (one CreateOrders call each).",
		func(m orderbackend.MetricsSnapshot) int64 { return m.Batches }),
	newOrdersCounter("batch_wins", "Wins in those batches: batch_wins / batches is the mean batch.",
		func(m orderbackend.MetricsSnapshot) int64 { return m.BatchWins }),
	newOrdersCounter("transactions", "Database transactions that created orders (with SQLite, batches waiting for the writer share one).",
		func(m orderbackend.MetricsSnapshot) int64 { return m.Txs }),
	newOrdersCounter("transaction_batches", "Batches those transactions answered: transaction_batches / transactions is the sharing.",
		func(m orderbackend.MetricsSnapshot) int64 { return m.TxCalls }),
	newOrdersCounter("transaction_wins", "Wins those transactions carried: transaction_wins / transactions is the mean per commit.",
		func(m orderbackend.MetricsSnapshot) int64 { return m.TxWins }),
}

// ordersCollector exports the counters of a pooled order backend. The backend outlives
// configurations, so the counters keep counting across reloads; before the backend first starts
// they read zero.
type ordersCollector struct{ runner *ordersRunner }

// Describe implements prometheus.Collector.
func (c ordersCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, oc := range ordersCounters {
		ch <- oc.desc
	}
}

// Collect implements prometheus.Collector.
func (c ordersCollector) Collect(ch chan<- prometheus.Metric) {
	var m orderbackend.MetricsSnapshot
	if st := c.runner.state(); st != nil {
		m = st.backend.Metrics()
	}
	for _, oc := range ordersCounters {
		ch <- prometheus.MustNewConstMetric(oc.desc, prometheus.CounterValue, float64(oc.value(m)))
	}
}

// registerOrdersMetrics registers the order backend's counters on reg.
func registerOrdersMetrics(reg prometheus.Registerer, runner *ordersRunner) error {
	if err := reg.Register(ordersCollector{runner: runner}); err != nil {
		var dup prometheus.AlreadyRegisteredError
		if errors.As(err, &dup) {
			return nil
		}
		return fmt.Errorf("register order metrics: %w", err)
	}
	return nil
}
