package redisstore

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Redis returns the store's client and key prefix, for what shares the store's Redis: the
// captchas and the distributed user rate limit. Close closes the client.
func (s *Store) Redis() (redis.UniversalClient, string) { return s.client, s.prefix }

// metric builds a fully qualified name of the seckill app's metrics (caddy_seckill_*).
func metric(name string) string { return prometheus.BuildFQName("caddy", "seckill", name) }

// The store's metrics: the stock transfers between the buckets of split activities, counted by
// this node since the store was created, each bucket's stock as last read, and, with replicas_ack,
// the WAITs and their shortfalls.
var (
	bucketCounterDescs = [...]*prometheus.Desc{
		prometheus.NewDesc(metric("bucket_transfers_total"), "Stock transfers between the buckets of split activities completed by this node: "+
			"pulls into a dry bucket, rebalancing and recovered transfers.", nil, nil),
		prometheus.NewDesc(metric("bucket_items_moved_total"), "Items those bucket transfers moved.", nil, nil),
		prometheus.NewDesc(metric("bucket_transfers_recovered_total"), "Bucket transfers a crashed or slow runner left pending that this node completed.", nil, nil),
		prometheus.NewDesc(metric("bucket_dry_pulls_total"), "Admissions whose buyer's home bucket had too little stock, so that stock was pulled in from another bucket.", nil, nil),
		prometheus.NewDesc(metric("bucket_contended_total"), "Buys of split activities answered 503 busy because other buyers won every item their pulls brought in while stock was left (layer contended).", nil, nil),
		prometheus.NewDesc(metric("bucket_transfer_failures_total"), "Bucket transfers (pulls, rebalancing, recoveries) that failed part-way on this node; a recovery completes them later.", nil, nil),
	}
	bucketStockDesc = prometheus.NewDesc(metric("bucket_stock"),
		"Unsold stock of each bucket of a split activity, as this node's store last read it (its rebalancer reads every rebalance_interval).",
		[]string{"activity", "bucket"}, nil)
	ackWaitsDesc = prometheus.NewDesc(metric("replicas_ack_waits_total"),
		"Redis WAITs sent for replicas_ack: one per pipeline of admission script calls and master, and one per release.", nil, nil)
	ackShortfallsDesc = prometheus.NewDesc(metric("replicas_ack_shortfalls_total"),
		"Redis WAITs for replicas_ack that fewer replicas than asked acknowledged in time; their wins and releases were answered busy.", nil, nil)
)

// Describe implements prometheus.Collector.
func (s *Store) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range bucketCounterDescs {
		ch <- d
	}
	ch <- bucketStockDesc
	if s.ReplicasAckEnabled() {
		ch <- ackWaitsDesc
		ch <- ackShortfallsDesc
	}
}

// Collect implements prometheus.Collector. It never calls Redis: the bucket stock is the
// store's last reading.
func (s *Store) Collect(ch chan<- prometheus.Metric) {
	b := s.BucketStats()
	for i, v := range [...]int64{b.Transfers, b.Moved, b.Recovered, b.DryPulls, b.Contended, b.FailedTransfers} {
		ch <- prometheus.MustNewConstMetric(bucketCounterDescs[i], prometheus.CounterValue, float64(v))
	}
	s.BucketLevels(func(activity string, stocks []int64) {
		for i, n := range stocks {
			ch <- prometheus.MustNewConstMetric(bucketStockDesc, prometheus.GaugeValue, float64(n), activity, strconv.Itoa(i))
		}
	})
	if s.ReplicasAckEnabled() {
		waits, shortfalls := s.ReplicaAcks()
		ch <- prometheus.MustNewConstMetric(ackWaitsDesc, prometheus.CounterValue, float64(waits))
		ch <- prometheus.MustNewConstMetric(ackShortfallsDesc, prometheus.CounterValue, float64(shortfalls))
	}
}
