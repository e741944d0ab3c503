//go:build !unix

package ocsf

import (
	"fmt"

	"github.com/palisade-sandbox/palisade/pkg/feature"
)

// OpenFD is not supported on this platform.
func OpenFD(spec string, fd int) (*Writer, error) {
	return nil, fmt.Errorf("ocsf: events destination %s: %w", spec, feature.ErrNotSupported)
}
