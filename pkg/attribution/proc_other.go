//go:build !linux

package attribution

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/palisade-sandbox/palisade/pkg/feature"
)

// ProcConfig configures the /proc backend (Linux only).
type ProcConfig struct {
	NetnsPID func() int
	Procs    func() ([]int, error)
	InitPID  int
	ProcRoot string
	Hashes   *HashCache
	Workers  int
	Writable []string
}

// ProcBackend is the /proc backend; it exists only on Linux.
type ProcBackend struct{}

// ProcStats counts a ProcBackend's work.
type ProcStats struct {
	Lookups  uint64    `json:"lookups"`
	NotFound uint64    `json:"not_found"`
	Scanned  uint64    `json:"processes_scanned"`
	Hashes   HashStats `json:"hashes"`
}

// NewProcBackend returns feature.ErrNotSupported off Linux.
func NewProcBackend(ProcConfig) (*ProcBackend, error) {
	return nil, fmt.Errorf("attribution: /proc backend: %w", feature.ErrNotSupported)
}

// Stats returns zero counters.
func (*ProcBackend) Stats() ProcStats { return ProcStats{} }

// Prepare returns feature.ErrNotSupported.
func (*ProcBackend) Prepare() error {
	return fmt.Errorf("attribution: /proc backend: %w", feature.ErrNotSupported)
}

// Counters returns nil.
func (*ProcBackend) Counters() map[string]uint64 { return nil }

// Close does nothing.
func (*ProcBackend) Close() error { return nil }

// Lookup returns feature.ErrNotSupported.
func (*ProcBackend) Lookup(context.Context, netip.AddrPort, netip.AddrPort) (*Identity, error) {
	return nil, fmt.Errorf("attribution: /proc backend: %w", feature.ErrNotSupported)
}
