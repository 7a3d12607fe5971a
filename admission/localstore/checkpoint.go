package localstore

import (
	"os"
	"path/filepath"
	"time"
)

// localCheckpointEvery is how often the WAL is folded into the database file while commits come.
// SQLite's automatic checkpoint (every 1,000 pages) ran inside a commit and synced both files,
// which doubled the cost of a win (docs/admission.md).
const localCheckpointEvery = time.Second

// syncLoop readies the writer's checkpoints: every checkpointEvery, when commits came, it flushes
// the WAL to the device on a descriptor of its own, which takes no SQLite lock, so commits go on
// meanwhile; then it asks the writer for the checkpoint. The checkpoint's own sync of the WAL then
// has only the last few milliseconds' frames to flush, not a second's, which roughly halves the
// stall (docs/admission.md, "Group commit"; the stalls measured: docs/BENCHMARKS.md, "Store local").
func (w *localWriter) syncLoop() {
	defer close(w.syncDone)
	tick := time.NewTicker(w.checkpointEvery)
	defer tick.Stop()
	var wal *os.File
	defer func() {
		if wal != nil {
			_ = wal.Close()
		}
	}()
	var seen uint64 // commits at the last checkpoint asked for
	for {
		select {
		case <-tick.C:
		case <-w.stop:
			return
		}
		n := w.commits.Load()
		if n == seen {
			continue
		}
		seen = n
		if !w.fsyncAlways { // with fsync always every commit has synced it already
			if wal == nil {
				// SQLite holds no lock on the WAL file (only on the database), so a descriptor of
				// our own cannot drop one when it closes. A missing file: nothing to flush.
				wal, _ = os.Open(filepath.Join(w.dir, localDBName+"-wal"))
			}
			if wal != nil {
				_ = wal.Sync() // best effort: the checkpoint syncs the WAL itself anyway
			}
		}
		w.checkpointDue.Store(true)
		select {
		case w.wake <- struct{}{}: // an idle writer checkpoints now
		default:
		}
	}
}

// checkpoint folds the WAL into the database file, between two batches, on the writer's own
// connection: the store holds its database in exclusive locking mode (localDSN), so no other
// connection may. With no reader in the way the checkpoint copies every frame, and the next commit
// starts the WAL again from its beginning (cut back to journal_size_limit). Best effort: a failed
// checkpoint (a full disk) loses nothing, as the WAL keeps the commits and grows until one
// succeeds; commits themselves report a full disk.
func (w *localWriter) checkpoint() {
	t0 := time.Now()
	var busy, frames, done int
	err := w.db.QueryRow(`PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &frames, &done)
	if err != nil || busy != 0 || done < frames { // failed, or left frames behind
		w.checkpointsFailed.Add(1)
	}
	w.checkpoints.Add(1)
	w.checkpointBusy.Add(int64(time.Since(t0)))
}
