//go:build !linux

package state

import (
	"fmt"
	"os"

	"github.com/palisade-sandbox/palisade/pkg/feature"
)

func lockDir(dir string) (func(), error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("lock %s: %w", dir, feature.ErrNotSupported)
}

func fileUID(os.FileInfo) (int, bool) { return 0, false }

func lockFile(path string) (func(), error) {
	return nil, fmt.Errorf("lock %s: %w", path, feature.ErrNotSupported)
}
