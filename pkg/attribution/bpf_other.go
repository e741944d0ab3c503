//go:build !linux

package attribution

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/palisade-sandbox/palisade/pkg/feature"
)

// BPFConfig configures the eBPF backend (Linux only).
type BPFConfig struct {
	CgroupPath  string
	Proc        ProcConfig
	MaxConns    int
	MaxProcs    int
	CodeHooks   string
	NoSendGuard bool
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

// ErrNoGuard: no send guard off Linux.
var ErrNoGuard = errors.New("attribution: the send guard does not hold this connection")

// SendViolation is a send refused on a guarded connection (Linux only).
type SendViolation struct {
	PID, Thread int
	Exe, Comm   string
	ExeDev      uint32
	ExeIno      uint64
	Code        *ForeignCode
}

// Guard returns ErrNoGuard.
func (*BPFBackend) Guard(*Identity, func(SendViolation)) (func(), error) {
	return nil, fmt.Errorf("%w: %w", ErrNoGuard, feature.ErrNotSupported)
}

// GuardActive reports false.
func (*BPFBackend) GuardActive() (bool, error) { return false, feature.ErrNotSupported }

// CodeHooks reports none.
func (*BPFBackend) CodeHooks() (string, error) { return "", feature.ErrNotSupported }
