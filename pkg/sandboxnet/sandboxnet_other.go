//go:build !linux

package sandboxnet

import (
	"context"
	"fmt"

	"github.com/palisade-sandbox/palisade/pkg/feature"
)

// Attacher is not supported on this platform.
type Attacher struct{}

// New reports that the network fence needs Linux.
func New(cfg Config) (*Attacher, error) {
	return nil, fmt.Errorf("sandboxnet: %w", feature.ErrNotSupported)
}

// Attach is not supported on this platform.
func (a *Attacher) Attach(ctx context.Context, name string, initPID int) ([]string, func() error, error) {
	return nil, nil, fmt.Errorf("sandboxnet: %w", feature.ErrNotSupported)
}
