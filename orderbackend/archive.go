package orderbackend

import (
	"errors"
	"fmt"
)

// DefaultArchiveBatch is how many orders one archive transaction moves: short enough that the hot
// tables are never held for long (the other sales go on), big enough to move 100,000 orders in
// about a hundred commits.
const DefaultArchiveBatch = 1000

// ErrNotFinished is Archive's answer for a sale that still has work in the database: a pending
// order, a payment attempt without outcome or with a refund due, or an outbox row not relayed.
var ErrNotFinished = errors.New("the sale is not finished")

// ArchiveReport is what Archive did: the activity's orders in the hot table and in the archive
// before and after, and how many orders and payment attempts it moved in how many transactions.
type ArchiveReport struct {
	Activity       string `json:"activity"`
	HotBefore      int64  `json:"hot_before"`
	ArchivedBefore int64  `json:"archived_before"`
	HotAfter       int64  `json:"hot_after"`
	ArchivedAfter  int64  `json:"archived_after"`
	Moved          int64  `json:"moved"`
	PaymentsMoved  int64  `json:"payments_moved"`
	Batches        int    `json:"batches"`
}

// String is the archive command's report.
func (r ArchiveReport) String() string {
	if r.Moved == 0 {
		return fmt.Sprintf("%s: nothing to archive (%d orders archived, %d in the hot table)\n", r.Activity, r.ArchivedAfter, r.HotAfter)
	}
	return fmt.Sprintf("%s: orders hot %d -> %d, archived %d -> %d; moved %d orders and %d payment attempts in %d batches\n",
		r.Activity, r.HotBefore, r.HotAfter, r.ArchivedBefore, r.ArchivedAfter, r.Moved, r.PaymentsMoved, r.Batches)
}

// archiveBatch bounds a batch: DefaultArchiveBatch when batch <= 0.
func archiveBatch(batch int) int {
	if batch <= 0 {
		return DefaultArchiveBatch
	}
	return batch
}

// unfinished says what keeps a sale from being archived, from the database's counts.
func unfinished(activity string, pending, openPays, outbox int64) error {
	if pending == 0 && openPays == 0 && outbox == 0 {
		return nil
	}
	return fmt.Errorf("archive %s: %w: %d orders pending payment, %d payment attempts to settle or refund, "+
		"%d outbox rows not relayed; archive it once the sweeper and the relay are done", activity, ErrNotFinished, pending, openPays, outbox)
}

// errorsIsNotFinished reports an ErrNotFinished from inside a transaction, which the database
// error wrappers must pass on as it is.
func errorsIsNotFinished(err error) bool { return errors.Is(err, ErrNotFinished) }
