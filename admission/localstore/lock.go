//go:build unix

package localstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes an exclusive flock on dir/LOCK; the kernel lets it go when the process dies, so a
// crash never leaves the folder locked.
func lockDir(dir string) (*os.File, error) {
	p := filepath.Join(dir, "LOCK")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open local store %s: lock file: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("open local store %s: %w", dir, ErrLocked)
		}
		return nil, fmt.Errorf("open local store %s: lock %s: %w", dir, p, err)
	}
	return f, nil
}

// mapShared maps the first size bytes of f for reading and writing, shared with the file: what is
// stored into the mapping is in the kernel's page cache at once.
func mapShared(f *os.File, size int) ([]byte, error) {
	return syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
}

func unmapShared(b []byte) error { return syscall.Munmap(b) }
