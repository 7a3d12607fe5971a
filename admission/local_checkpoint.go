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

// localCheckpointer folds the WAL into the database file in the background, on its own connection.
type localCheckpointer struct {
	db   *sql.DB
	w    *localWriter
	stop chan struct{}
	done chan struct{}
}

func newLocalCheckpointer(dir string, fsyncAlways bool, w *localWriter) (*localCheckpointer, error) {
	db, err := sql.Open("sqlite", localDSN(filepath.Join(dir, localDBName), fsyncAlways))
	if err != nil {
		return nil, fmt.Errorf("open local store %s: checkpointer: %w", dir, err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	c := &localCheckpointer{db: db, w: w, stop: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c, nil
}

func (c *localCheckpointer) run() {
	defer close(c.done)
	t := time.NewTicker(localCheckpointEvery)
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
			_, _ = c.db.Exec(`PRAGMA wal_checkpoint(PASSIVE)`)
		}
	}
}

func (c *localCheckpointer) close() error {
	close(c.stop)
	<-c.done
	return c.db.Close()
}
