//go:build !unix

package credentials

import (
	"fmt"

	"github.com/palisade-sandbox/palisade/pkg/feature"
)

// ReadFile needs file ownership, which this platform lacks.
func ReadFile(path string) ([]byte, error) {
	return nil, fmt.Errorf("credentials file %s: %w", path, feature.ErrNotSupported)
}

// LoadFile needs ReadFile.
func LoadFile(path string) (*File, error) {
	_, err := ReadFile(path)
	return nil, err
}
