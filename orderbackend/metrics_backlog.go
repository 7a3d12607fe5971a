package orderbackend

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// backlogScrapeTimeout bounds the store calls of one scrape: a slow store must not hang the
// metrics endpoint.
const backlogScrapeTimeout = 2 * time.Second

// Backlog returns, per activity in the store, the wins this backend's consumer group has not
// turned into an order or a dead letter yet (Queue.Backlog). Activities whose group does not
// exist yet, or whose count fails, are left out: a missing series is not a zero.
func (b *Backend) Backlog(ctx context.Context) map[string]int64 {
	ids, err := b.cfg.Store.Activities(ctx)
	if err != nil {
		return nil
	}
	group := b.cfg.Consumer.withDefaults().Group
	out := make(map[string]int64, len(ids))
	for _, id := range ids {
		if n, err := b.cfg.Store.Backlog(ctx, id, group); err == nil {
			out[id] = n
		}
	}
	return out
}

var backlogDesc = prometheus.NewDesc("caddy_seckill_orders_backlog",
	"Wins in the activity's queue the order backend's consumer group has not acknowledged yet (not yet an order or a dead letter).",
	[]string{"activity"}, nil)

// NewBacklogCollector exports caddy_seckill_orders_backlog{activity}, read from backlog on every
// scrape (one store call per activity), for the embedded and the standalone backend alike.
func NewBacklogCollector(backlog func(context.Context) map[string]int64) prometheus.Collector {
	return backlogCollector(backlog)
}

type backlogCollector func(context.Context) map[string]int64

// Describe implements prometheus.Collector.
func (backlogCollector) Describe(ch chan<- *prometheus.Desc) { ch <- backlogDesc }

// Collect implements prometheus.Collector.
func (c backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), backlogScrapeTimeout)
	defer cancel()
	for id, n := range c(ctx) {
		ch <- prometheus.MustNewConstMetric(backlogDesc, prometheus.GaugeValue, float64(n), id)
	}
}
