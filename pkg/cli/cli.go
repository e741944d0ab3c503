// Package cli holds the conventions every Palisade binary shares: the exit
// codes of DESIGN.md, typed errors that carry them, and the slog set-up
// behind --log-format.
//
// A main parses nothing itself; it calls run(ctx, args, stdin, stdout,
// stderr) and hands the returned error to Exit, which prints one line to
// stderr and exits with the code the error carries.
package cli

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
)

// Exit codes shared by every binary.
const (
	ExitOK     = 0 // success
	ExitFailed = 1 // a check failed or something was denied
	ExitUsage  = 2 // bad flags or arguments
)

// Error is an error with an exit code. Silent errors have already told the
// operator what went wrong (for example a list of validation problems on
// stdout) and Exit prints nothing more for them.
type Error struct {
	Code   int
	Err    error
	Silent bool
}

func (e *Error) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Usagef returns a usage error (exit 2).
func Usagef(format string, args ...any) error {
	return &Error{Code: ExitUsage, Err: fmt.Errorf(format, args...)}
}

// Failf returns a check-failed error (exit 1).
func Failf(format string, args ...any) error {
	return &Error{Code: ExitFailed, Err: fmt.Errorf(format, args...)}
}

// WithCode wraps err so that Exit uses code.
func WithCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Code: code, Err: err}
}

// Quiet returns an error that exits with code and prints nothing.
func Quiet(code int) error { return &Error{Code: code, Silent: true} }

// Code reports the exit code for err: 0 for nil, the carried code for an
// *Error, 1 otherwise.
func Code(err error) int {
	if err == nil {
		return ExitOK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ExitFailed
}

// Exit prints err (prefixed with the program name) and exits with its code.
func Exit(prog string, err error, stderr io.Writer) {
	code := Code(err)
	if err != nil {
		var e *Error
		if !(errors.As(err, &e) && e.Silent) {
			fmt.Fprintf(stderr, "%s: %v\n", prog, err)
		}
	}
	os.Exit(code)
}

// NewLogger returns the logger selected by --log-format ("text" or "json"),
// writing to w (stderr in every binary).
func NewLogger(format string, w io.Writer, level slog.Level) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(format) {
	case "", "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, Usagef("--log-format: unknown format %q (want text or json)", format)
	}
}

// Truthy reports whether an environment value means "on" in the seeds'
// sense: 1, true, yes, on (any case). Everything else, including empty, is off.
func Truthy(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}
