//go:build !unix

package collector

import (
	"os"

	"github.com/palisade-sandbox/palisade/pkg/feature"
)

func fileIdentity(os.FileInfo) (fileID, bool) { return fileID{}, false }

func lockDir(string) (*os.File, error) { return nil, feature.ErrNotSupported }
