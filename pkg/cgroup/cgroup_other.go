//go:build !linux

package cgroup

import (
	"fmt"

	"github.com/palisade-sandbox/palisade/pkg/feature"
)

// Group is a sandbox control group. Without Linux there are none.
type Group struct{}

// Supported reports that control groups exist only on Linux.
func Supported() error { return feature.ErrNotSupported }

// New fails: control groups exist only on Linux.
func New(name string, lim Limits) (*Group, error) {
	return nil, fmt.Errorf("cgroup: %w", feature.ErrNotSupported)
}

// Open fails: control groups exist only on Linux.
func Open(name string) (*Group, error) {
	return nil, fmt.Errorf("cgroup: %w", feature.ErrNotSupported)
}

// Name returns "".
func (g *Group) Name() string { return "" }

// Limits returns the zero Limits.
func (g *Group) Limits() Limits { return Limits{} }

// Path returns "".
func (g *Group) Path(string) string { return "" }

// AddPID fails: control groups exist only on Linux.
func (g *Group) AddPID(int) error { return fmt.Errorf("cgroup: %w", feature.ErrNotSupported) }

// Procs fails: control groups exist only on Linux.
func (g *Group) Procs() ([]int, error) { return nil, fmt.Errorf("cgroup: %w", feature.ErrNotSupported) }

// Kill fails: control groups exist only on Linux.
func (g *Group) Kill() error { return fmt.Errorf("cgroup: %w", feature.ErrNotSupported) }

// Destroy fails: control groups exist only on Linux.
func (g *Group) Destroy() error { return fmt.Errorf("cgroup: %w", feature.ErrNotSupported) }

// Stats fails: control groups exist only on Linux.
func (g *Group) Stats() (Stats, error) {
	return Stats{}, fmt.Errorf("cgroup: %w", feature.ErrNotSupported)
}

// Describe returns an empty description.
func (g *Group) Describe() Description { return Description{} }

// Close does nothing.
func (g *Group) Close() error { return nil }

// StartIn is not supported on this platform.
func (g *Group) StartIn(cmd interface{ Start() error }) error {
	return fmt.Errorf("cgroup: %w", feature.ErrNotSupported)
}
