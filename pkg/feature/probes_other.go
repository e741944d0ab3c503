//go:build !linux

package feature

// LandlockABI reports that Landlock does not exist on this platform.
func LandlockABI() (int, error) { return 0, ErrNotSupported }
