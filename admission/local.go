package admission

import (
	"errors"
	"time"
)

// ErrLocalLocked is returned by OpenLocalStore when another process (or another LocalStore in this
// one) holds the folder: two writers would each believe they own the stock.
var ErrLocalLocked = errors.New("local store folder is locked by another process")

// LocalOptions configures a LocalStore.
type LocalOptions struct {
	Now         func() time.Time // store clock; nil = time.Now (tests pass a fake clock)
	FsyncAlways bool             // flush each group commit to the device (power-loss safe); default:
	// each commit is handed to the OS before any answer (process-crash safe)
}

// LocalStore is the durable single-node Store: MemoryStore's state machine decides, and every
// change it makes is committed to an SQLite database in a folder before the answer leaves.
type LocalStore struct {
	*MemoryStore
}

// OpenLocalStore opens (or creates) the durable store in dir.
func OpenLocalStore(dir string, opts LocalOptions) (*LocalStore, error) {
	return nil, errors.New("open local store " + dir + ": not implemented yet")
}
