//go:build !linux

package caps

import "github.com/palisade-sandbox/palisade/pkg/feature"

// PrepareThread is not supported on this platform.
func PrepareThread() error { return feature.ErrNotSupported }

// ReadStatus is not supported on this platform.
func ReadStatus(pid int) (Status, error) { return Status{}, feature.ErrNotSupported }
