//go:build !linux

package probe

import (
	"context"
	"io"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/feature"
)

// LaunchOptions configure Launch.
type LaunchOptions struct {
	Policy, Supervisor, ProbeBin, StateDir, TempDir string
	Timeout                                         time.Duration
	Stderr                                          io.Writer
}

// Launched describes the probe sandbox.
type Launched struct {
	Sandbox      string `json:"sandbox"`
	PolicySource string `json:"policy_source"`
	PolicyPath   string `json:"policy_path"`
	PolicySHA256 string `json:"policy_sha256"`
	Canary       bool   `json:"canary_network_entry"`
	ExitCode     int    `json:"sandbox_exit_code"`
}

// Launch is unsupported off Linux.
func Launch(context.Context, LaunchOptions) (Verdict, Launched, error) {
	return Verdict{}, Launched{}, feature.ErrNotSupported
}
