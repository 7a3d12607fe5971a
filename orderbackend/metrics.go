package orderbackend

import "sync/atomic"

// Metrics counts what the backend did, for logs, the admin API and Prometheus collectors. One
// Metrics is shared by a backend's consumers, sweeper and relay; the zero value is ready.
type Metrics struct {
	OrdersCreated atomic.Int64 // wins that became a new order
	Redelivered   atomic.Int64 // entries whose order already existed (a redelivery or a claim)
	DeadLettered  atomic.Int64 // entries moved to the dead-letter queue (poison or refused)
	Refused       atomic.Int64 // of which the database stock guard refused
	Paid          atomic.Int64 // orders paid
	Expired       atomic.Int64 // orders cancelled by the sweeper
	Cancelled     atomic.Int64 // orders cancelled by their owner
	Released      atomic.Int64 // reservations this process released in the store
	Retries       atomic.Int64 // operations retried after a transient failure
	Batches       atomic.Int64 // read batches the consumers turned into orders (successful CreateOrders calls)
	BatchWins     atomic.Int64 // wins in those batches: BatchWins/Batches is the mean batch
}

// MetricsSnapshot is a copy of the counters. The Tx fields are the repository's (TxStats, when it
// reports them), filled in by Backend.Metrics: its transactions that created orders, the
// CreateOrders calls and the wins they carried. With SQLite's group commit several batches share
// a transaction, so TxWins/Txs, the mean wins per transaction, is above BatchWins/Batches.
type MetricsSnapshot struct {
	OrdersCreated, Redelivered, DeadLettered, Refused int64
	Paid, Expired, Cancelled, Released, Retries       int64
	Batches, BatchWins                                int64
	Txs, TxCalls, TxWins                              int64
}

// Snapshot copies the counters (the Tx fields stay zero: they are the repository's).
func (m *Metrics) Snapshot() MetricsSnapshot {
	return MetricsSnapshot{
		OrdersCreated: m.OrdersCreated.Load(), Redelivered: m.Redelivered.Load(), DeadLettered: m.DeadLettered.Load(),
		Refused: m.Refused.Load(), Paid: m.Paid.Load(), Expired: m.Expired.Load(), Cancelled: m.Cancelled.Load(),
		Released: m.Released.Load(), Retries: m.Retries.Load(), Batches: m.Batches.Load(), BatchWins: m.BatchWins.Load(),
	}
}
