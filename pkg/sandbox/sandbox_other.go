//go:build !linux

package sandbox

import (
	"context"
	"fmt"
	"io"

	"github.com/palisade-sandbox/palisade/pkg/feature"
	"github.com/palisade-sandbox/palisade/pkg/state"
)

// Run is not supported on this platform: sandboxes need Linux.
func Run(ctx context.Context, o Options) (Result, error) {
	return Result{ExitCode: ExitSandboxFailed}, fmt.Errorf("sandbox: %w", feature.ErrNotSupported)
}

// RunInit is not supported on this platform.
func RunInit() { panic("sandbox init: " + feature.ErrNotSupported.Error()) }

// RestoreTerminals does nothing on this platform.
func RestoreTerminals() {}

// Collect is not supported on this platform.
func Collect(l state.Labels) error { return fmt.Errorf("sandbox: %w", feature.ErrNotSupported) }

// RegisterCollector does nothing on this platform.
func RegisterCollector(fn func(state.Labels) error) {}

// Prestarted is empty on this platform.
type Prestarted struct{}

// Prestart does nothing on this platform.
func Prestart(PrestartOptions) *Prestarted { return nil }

// Abort does nothing on this platform.
func (p *Prestarted) Abort() {}

// Signals is empty on this platform.
type Signals struct{}

// CatchSignals does nothing on this platform.
func CatchSignals() *Signals { return nil }

// Stop does nothing on this platform.
func (s *Signals) Stop() {}

// Sandbox is empty on this platform.
type Sandbox struct{}

// Create is not supported on this platform.
func Create(ctx context.Context, o Options) (*Sandbox, error) {
	return &Sandbox{}, fmt.Errorf("sandbox: %w", feature.ErrNotSupported)
}

// Name is empty on this platform.
func (s *Sandbox) Name() string { return "" }

// Start is not supported on this platform.
func (s *Sandbox) Start(ctx context.Context) error {
	return fmt.Errorf("sandbox: %w", feature.ErrNotSupported)
}

// Wait is not supported on this platform.
func (s *Sandbox) Wait(ctx context.Context) (Result, error) {
	return Result{ExitCode: ExitSandboxFailed}, fmt.Errorf("sandbox: %w", feature.ErrNotSupported)
}

// Destroy does nothing on this platform.
func (s *Sandbox) Destroy() {}

// ExecOptions describe one exec (unused on this platform).
type ExecOptions struct {
	StateRoot, Name, Workdir string
	ExpectID                 string
	Args, Env                []string
	TTY, NoLoginShell        bool
	Signals                  *Signals
	Events                   Events
	Stdin                    io.Reader
	Stdout, Stderr           io.Writer
}

// Exec is not supported on this platform.
func Exec(ctx context.Context, o ExecOptions) (Result, error) {
	return Result{ExitCode: ExitSandboxFailed}, fmt.Errorf("sandbox: %w", feature.ErrNotSupported)
}

// Retain does nothing on this platform.
func (s *Sandbox) Retain() {}
