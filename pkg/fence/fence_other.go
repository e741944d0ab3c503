//go:build !linux

package fence

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/palisade-sandbox/palisade/pkg/feature"
)

// Setup needs Linux network namespaces and nftables.
func Setup(ctx context.Context, cfg Config) (*Fence, error) {
	return nil, fmt.Errorf("fence: %w", feature.ErrNotSupported)
}

// Teardown needs Linux.
func (f *Fence) Teardown() error { return fmt.Errorf("fence: %w", feature.ErrNotSupported) }

// FlushConntrack needs Linux.
func (f *Fence) FlushConntrack() error { return fmt.Errorf("fence: %w", feature.ErrNotSupported) }

// Collect needs Linux.
func Collect(sandbox string) error { return fmt.Errorf("fence: %w", feature.ErrNotSupported) }

// Collect needs Linux.
func (c Config) Collect() error { return fmt.Errorf("fence: %w", feature.ErrNotSupported) }

// Leftovers needs Linux.
func (c Config) Leftovers() ([]string, error) {
	return nil, fmt.Errorf("fence: %w", feature.ErrNotSupported)
}

// CollectOrphans needs Linux.
func (c Config) CollectOrphans(ctx context.Context, owned func(string) bool, apply bool) ([]string, error) {
	return nil, fmt.Errorf("fence: %w", feature.ErrNotSupported)
}

// OriginalDst needs Linux conntrack.
func OriginalDst(conn *net.TCPConn) (netip.AddrPort, error) {
	return netip.AddrPort{}, fmt.Errorf("fence: %w", feature.ErrNotSupported)
}
