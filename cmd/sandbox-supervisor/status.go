package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/sandbox"
)

// maxStatusError bounds the error text of a status line, so that it
// always fits a pipe's buffer and the supervisor never blocks on it.
const maxStatusError = 4096

// runStatus is run's and exec's --status-fd: a descriptor, opened by the
// caller, where the supervisor writes one JSON line when it ends. Only the supervisor
// writes it (it is close-on-exec from the start, so neither the init nor
// the proxy nor the command holds it), so a caller reading it can tell
// the supervisor's own failure (exit 125: the sandbox not created, an
// exec that ran nothing) from a command that exited 125 and printed
// whatever it liked: the status is a channel the command cannot write.
// exec hands the sandbox only its stdin, stdout and stderr, so the
// descriptor never reaches the exec'd command either.
type runStatus struct {
	f       *os.File
	command bool // the exit code is the command's own
}

// statusLine is what --status-fd receives.
type statusLine struct {
	ExitCode int `json:"exit_code"`
	// FromCommand: ExitCode is the command's own status (0 included);
	// otherwise the supervisor ended the run.
	FromCommand bool `json:"from_command"`
	// Error is the supervisor's own message when it ended the run.
	Error string `json:"error,omitempty"`
	// Reason classifies a few of the supervisor's own outcomes for
	// scripts: "id_mismatch" when exec --expect-id named another
	// sandbox (nothing ran).
	Reason string `json:"reason,omitempty"`
}

func openRunStatus(fd int) (*runStatus, error) {
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
		return nil, fmt.Errorf("descriptor %d is not open: %w", fd, err)
	}
	unix.CloseOnExec(fd)
	return &runStatus{f: os.NewFile(uintptr(fd), "status")}, nil
}

// fromCommand marks the run's outcome as the command's own status.
func (s *runStatus) fromCommand() {
	if s != nil {
		s.command = true
	}
}

// write reports err (nil: success) and closes the descriptor.
func (s *runStatus) write(err error) {
	if s == nil {
		return
	}
	line := statusLine{ExitCode: cli.Code(err), FromCommand: s.command}
	var e *cli.Error
	if err != nil && !s.command && !(errors.As(err, &e) && e.Silent) {
		line.Error = err.Error()
		if len(line.Error) > maxStatusError {
			line.Error = line.Error[:maxStatusError]
		}
		if errors.Is(err, sandbox.ErrIDMismatch) {
			line.Reason = "id_mismatch"
		}
	}
	data, _ := json.Marshal(line)
	s.f.Write(append(data, '\n'))
	s.f.Close()
}
