//go:build !linux

package attribution

import (
	"os"

	"github.com/palisade-sandbox/palisade/pkg/feature"
)

func fileKeyOf(*os.File) (fileKey, error) { return fileKey{}, feature.ErrNotSupported }
