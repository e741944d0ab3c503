//go:build !unix

package ocsf

import (
	"fmt"
	"os"

	"github.com/palisade-sandbox/palisade/pkg/feature"
)

// InheritedFile is not supported on this platform.
func InheritedFile(spec string, fd int) (*os.File, error) {
	return nil, fmt.Errorf("ocsf: destination %s: %w", spec, feature.ErrNotSupported)
}

// OpenFD is not supported on this platform.
func OpenFD(spec string, fd int) (*Writer, error) {
	return nil, fmt.Errorf("ocsf: events destination %s: %w", spec, feature.ErrNotSupported)
}
