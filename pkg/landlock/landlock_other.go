//go:build !linux

package landlock

import "github.com/palisade-sandbox/palisade/pkg/feature"

// Ruleset is a built Landlock ruleset (Linux only).
type Ruleset struct{}

// Build reports that Landlock is not supported on this platform.
func Build(r Rules) (*Ruleset, error) {
	if r.HardRequirement {
		return nil, feature.ErrNotSupported
	}
	return nil, nil
}

// Result reports nothing on this platform.
func (rs *Ruleset) Result() Result { return Result{} }

// Close does nothing on this platform.
func (rs *Ruleset) Close() error { return nil }

// Enforce is not supported on this platform.
func (rs *Ruleset) Enforce() (Result, error) { return Result{}, feature.ErrNotSupported }

// Offer reports that Landlock is unavailable on this platform.
func Offer() Result { return Result{} }
