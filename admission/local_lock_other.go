//go:build !unix

package admission

import (
	"fmt"
	"os"
)

// lockDir needs flock, which this platform does not have.
func lockDir(dir string) (*os.File, error) {
	return nil, fmt.Errorf("open local store %s: %w", dir, badInput("store local needs a Unix system (flock)"))
}
