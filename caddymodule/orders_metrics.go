package caddymodule

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

// registerOrdersMetrics registers the order backend's counters, its backlog and its payment
// notifications on reg.
func registerOrdersMetrics(reg prometheus.Registerer, runner *ordersRunner) error {
	// The backend outlives configurations that keep its settings, so the counters keep counting
	// across such reloads; a changed orders configuration starts a new backend, counting from
	// zero, as does a backend before it first starts.
	snapshot := func() orderbackend.MetricsSnapshot {
		if st := runner.state(); st != nil {
			return st.backend.Metrics()
		}
		return orderbackend.MetricsSnapshot{}
	}
	backlog := func(ctx context.Context) map[string]int64 {
		if st := runner.state(); st != nil {
			return st.backend.Backlog(ctx)
		}
		return nil
	}
	notifications := func() (received, refused []orderbackend.NotificationCount) {
		if st := runner.state(); st != nil {
			return st.backend.Notifications()
		}
		return nil, nil
	}
	for _, c := range []prometheus.Collector{orderbackend.NewCollector(snapshot), orderbackend.NewBacklogCollector(backlog),
		orderbackend.NewNotificationCollector(notifications)} {
		if err := reg.Register(c); err != nil {
			var dup prometheus.AlreadyRegisteredError
			if errors.As(err, &dup) {
				continue
			}
			return fmt.Errorf("register order metrics: %w", err)
		}
	}
	return nil
}
