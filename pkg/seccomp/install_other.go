//go:build !linux

package seccomp

import (
	"fmt"

	"golang.org/x/net/bpf"

	"github.com/palisade-sandbox/palisade/pkg/feature"
)

// Install is not available off Linux.
func Install(filter []bpf.RawInstruction) error {
	return fmt.Errorf("seccomp: install filter: %w", feature.ErrNotSupported)
}
