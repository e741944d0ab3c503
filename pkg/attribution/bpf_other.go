//go:build !linux

package attribution

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/palisade-sandbox/palisade/pkg/feature"
)

// BPFConfig configures the eBPF backend (Linux only).
type BPFConfig struct {
	CgroupPath string
	Proc       ProcConfig
	MaxConns   int
	CodeHooks  string
}

// Code hook settings (BPFConfig.CodeHooks).
const (
	HooksTracepoints = "tracepoints"
	HooksOff         = "off"
)

// BPFBackend is the eBPF backend; it exists only on Linux.
type BPFBackend struct{}

// Map sizes of bpf/attr.c.
const (
	BPFMaxConns = 65536
	BPFMaxProcs = 32768
	// BPFMaxTuples bounds the 4-tuple index of connecting sockets.
	BPFMaxTuples = 65536
)

// NewBPFBackend returns feature.ErrNotSupported off Linux.
func NewBPFBackend(BPFConfig) (*BPFBackend, error) {
	return nil, fmt.Errorf("attribution: eBPF backend: %w", feature.ErrNotSupported)
}

// Prepare returns feature.ErrNotSupported.
func (*BPFBackend) Prepare() error {
	return fmt.Errorf("attribution: eBPF backend: %w", feature.ErrNotSupported)
}

// Close does nothing.
func (*BPFBackend) Close() error { return nil }

// Counters returns nil.
func (*BPFBackend) Counters() map[string]uint64 { return nil }

// Lookup returns feature.ErrNotSupported.
func (*BPFBackend) Lookup(context.Context, netip.AddrPort, netip.AddrPort) (*Identity, error) {
	return nil, fmt.Errorf("attribution: eBPF backend: %w", feature.ErrNotSupported)
}
