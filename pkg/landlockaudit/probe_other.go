//go:build !linux

package landlockaudit

// Describe says that audit records are not available on this platform.
func Describe() string { return "unavailable: Linux only" }
