package admission

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"time"
)

// localCheckpointEvery is how often the WAL is folded into the database file while commits come.
// SQLite's own checkpoint runs inside a commit and syncs both files, which doubled the cost of a
// win (docs/admission.md); a passive checkpoint on another connection does not hold up commits.
const localCheckpointEvery = time.Second

// localWALRestartFrames is the WAL length (in 4 KiB pages) beyond which the writer checkpoints
// between two batches. While commits keep coming a passive checkpoint never catches up with the
// end of the WAL, and SQLite starts the WAL again from its beginning only after one has: 200,000
// wins in 2.6 s had left a 126 MB WAL. The writer's own checkpoint has only the frames since the
// last background one to copy, and none are added while it runs.
const localWALRestartFrames = 4000

// localCheckpointer folds the WAL into the database file in the background, on its own connection.
type localCheckpointer struct {
	db    *sql.DB
	w     *localWriter
	every time.Duration
	stop  chan struct{}
	done  chan struct{}
}

func newLocalCheckpointer(dir string, fsyncAlways bool, every time.Duration, w *localWriter) (*localCheckpointer, error) {
	if every <= 0 {
		every = localCheckpointEvery
	}
	db, err := sql.Open("sqlite", localDSN(filepath.Join(dir, localDBName), fsyncAlways))
	if err != nil {
		return nil, fmt.Errorf("open local store %s: checkpointer: %w", dir, err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	c := &localCheckpointer{db: db, w: w, every: every, stop: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c, nil
}

func (c *localCheckpointer) run() {
	defer close(c.done)
	t := time.NewTicker(c.every)
	defer t.Stop()
	var seen uint64
	for {
		select {
		case <-t.C:
		case <-c.stop:
			return
		}
		if n := c.w.commits.Load(); n != seen {
			seen = n
			// A failed checkpoint (a full disk) loses nothing: the WAL keeps the commits and
			// grows until one succeeds; commits themselves report a full disk.
			var busy, frames, done int
			err := c.db.QueryRow(`PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &frames, &done)
			if err == nil && frames > localWALRestartFrames {
				c.w.restartWAL.Store(true)
			}
		}
	}
}

func (c *localCheckpointer) close() error {
	close(c.stop)
	<-c.done
	return c.db.Close()
}
