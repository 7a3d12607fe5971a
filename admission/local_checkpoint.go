package admission

import (
	"time"
)

// localCheckpointEvery is how often the writer folds the WAL into the database file while commits
// come. SQLite's automatic checkpoint (every 1,000 pages) ran inside a commit and synced both
// files, which doubled the cost of a win (docs/admission.md); one a second costs a few
// milliseconds of the writer's time.
const localCheckpointEvery = time.Second

// checkpoint folds the WAL into the database file, between two batches, on the writer's own
// connection: the store holds its database in exclusive locking mode (localDSN), so no other
// connection may. With no reader in the way the checkpoint copies every frame, and the next commit
// starts the WAL again from its beginning (cut back to journal_size_limit). Best effort: a failed
// checkpoint (a full disk) loses nothing, as the WAL keeps the commits and grows until one
// succeeds; commits themselves report a full disk.
func (w *localWriter) checkpoint() {
	t0 := time.Now()
	var busy, frames, done int
	if err := w.db.QueryRow(`PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &frames, &done); err != nil || busy != 0 {
		w.checkpointsFailed.Add(1)
	}
	w.checkpoints.Add(1)
	w.checkpointBusy.Add(int64(time.Since(t0)))
}
