package caddymodule

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

// registerOrdersMetrics registers the order backend's counters on reg.
func registerOrdersMetrics(reg prometheus.Registerer, runner *ordersRunner) error {
	// The backend outlives configurations, so the counters keep counting across reloads; before
	// the backend first starts they read zero.
	snapshot := func() orderbackend.MetricsSnapshot {
		if st := runner.state(); st != nil {
			return st.backend.Metrics()
		}
		return orderbackend.MetricsSnapshot{}
	}
	if err := reg.Register(orderbackend.NewCollector(snapshot)); err != nil {
		var dup prometheus.AlreadyRegisteredError
		if errors.As(err, &dup) {
			return nil
		}
		return fmt.Errorf("register order metrics: %w", err)
	}
	return nil
}
