// Package orderbackend turns the wins an admission.Store queues into orders, takes payment and
// gives unpaid items back after the payment window.
//
// The hand-off is lossless and duplicate-free: a Consumer reads an activity's wins queue as a
// member of a consumer group and acknowledges an entry only after the database transaction that
// created its order (one per read batch, with the outcomes of one per win; with SQLite, batches
// waiting for the writer share one) has committed; an order is unique on its reservation id, so a
// redelivered entry finds the order it already made. The database keeps its own stock counter and
// refuses a win that would take it below zero, as the last guard against overselling.
//
// Pay and timeout race on one row and are each one conditional update (expires_at > now versus
// expires_at <= now), so exactly one wins. A cancellation (timeout or owner) gives the items back
// to the database stock and writes an outbox row in the same transaction; a Relay hands the row to
// the store's exactly-once Release and deletes it. Every state change is written to the buyer's
// result record in the store, so polling for a result never touches the database.
//
// Reconcile checks the invariants of the whole funnel (no oversell, no lost win, no undersell).
package orderbackend
