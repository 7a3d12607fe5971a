//go:build !unix

package localstore

import (
	"fmt"
	"os"
)

// lockDir needs flock, which this platform does not have.
func lockDir(dir string) (*os.File, error) {
	return nil, fmt.Errorf("open local store %s: %w", dir, BadInput("store local needs a Unix system (flock)"))
}

// mapShared needs mmap, which this platform's syscall package does not offer.
func mapShared(*os.File, int) ([]byte, error) {
	return nil, BadInput("store local needs a Unix system (mmap)")
}

func unmapShared([]byte) error { return nil }
