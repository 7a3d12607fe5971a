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

// ordersCounters are the backend's counters, from orderbackend.Counters: the standalone backend
// (cmd/orderbackend -metrics-listen) exports the same list under the same names.
var ordersCounters = func() []ordersCounter {
	var out []ordersCounter
	for _, c := range orderbackend.Counters() {
		out = append(out, ordersCounter{desc: prometheus.NewDesc(c.MetricName(), c.Help, nil, nil), value: c.Value})
	}
	return out
}()

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
