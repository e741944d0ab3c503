//go:build !linux

package probe

import (
	"context"

	"github.com/palisade-sandbox/palisade/pkg/feature"
)

// Launch is unsupported off Linux.
func Launch(context.Context, LaunchOptions) (Verdict, Launched, error) {
	return Verdict{}, Launched{}, feature.ErrNotSupported
}
