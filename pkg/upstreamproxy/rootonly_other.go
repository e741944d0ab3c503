//go:build !unix

package upstreamproxy

import (
	"fmt"

	"github.com/palisade-sandbox/palisade/pkg/feature"
)

// readRootOnly cannot check a file's owner and mode outside Unix.
func readRootOnly(path string) ([]byte, error) {
	return nil, fmt.Errorf("%s: %w", path, feature.ErrNotSupported)
}
