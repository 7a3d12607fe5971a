package localstore

import "github.com/prometheus/client_golang/prometheus"

// localCounter is one of the store's group-commit counters as a metric.
type localCounter struct {
	desc  *prometheus.Desc
	value func(Stats) float64
}

func newLocalCounter(name, help string, value func(Stats) float64) localCounter {
	return localCounter{prometheus.NewDesc(prometheus.BuildFQName("caddy", "seckill", name), help, nil, nil), value}
}

// localCounters export the group commits: their rate, mean batch and cost, which together bound
// the wins a second the folder can take.
var localCounters = [...]localCounter{
	newLocalCounter("local_commits_total", "Transactions store local committed (group commits) since this process opened its folder.",
		func(s Stats) float64 { return float64(s.Commits) }),
	newLocalCounter("local_committed_changes_total", "Changes (wins, releases, result records, queue moves) those commits held; divided by the commits, the mean batch.",
		func(s Stats) float64 { return float64(s.Changes) }),
	newLocalCounter("local_commit_seconds_total", "Time store local spent writing and committing its batches; divided by the commits, what one commit costs.",
		func(s Stats) float64 { return s.CommitTime.Seconds() }),
	newLocalCounter("local_checkpoints_total", "Checkpoints store local ran (the WAL folded into the database file, about one a second while commits come).",
		func(s Stats) float64 { return float64(s.Checkpoints) }),
	newLocalCounter("local_checkpoints_failed_total", "Checkpoints that failed, as on a full disk: the WAL keeps the commits and grows until one succeeds.",
		func(s Stats) float64 { return float64(s.CheckpointsFailed) }),
	newLocalCounter("local_checkpoint_seconds_total", "Time store local's checkpoints took; commits wait meanwhile, so divided by the checkpoints, one stall.",
		func(s Stats) float64 { return s.CheckpointTime.Seconds() }),
	newLocalCounter("local_ring_replayed_changes_total", "Changes store local found in its ring and not in its database when it opened the folder (a crash came before their commit), and committed.",
		func(s Stats) float64 { return float64(s.Replayed) }),
	newLocalCounter("local_unringed_changes_total", "Changes that did not go into store local's ring (its slots all held changes not yet committed, or the change was larger than a slot): their callers waited for the commit.",
		func(s Stats) float64 { return float64(s.Unringed) }),
}

// Describe implements prometheus.Collector.
func (s *Store) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range localCounters {
		ch <- c.desc
	}
}

// Collect implements prometheus.Collector: the counters of every opening of the folder in this
// process, so that they never go down across a reopen.
func (s *Store) Collect(ch chan<- prometheus.Metric) {
	st := s.Stats()
	for _, c := range localCounters {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, c.value(st))
	}
}
