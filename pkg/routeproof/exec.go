package routeproof

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// MaxOutput bounds how much of each stream the classifier keeps.
const MaxOutput = 1 << 20

// capped keeps the first MaxOutput bytes and discards the rest.
type capped struct{ bytes.Buffer }

func (c *capped) Write(p []byte) (int, error) {
	if room := MaxOutput - c.Len(); room > 0 {
		if len(p) > room {
			c.Buffer.Write(p[:room])
		} else {
			c.Buffer.Write(p)
		}
	}
	return len(p), nil
}

// Options are one probe run.
type Options struct {
	CLI      string
	Sentinel string
	Timeout  time.Duration
	Args     []string // the probe command
	Env      []string // nil: this process's environment
	// Transcript, when set, receives both streams as captured (the
	// operator's "read the probe output"); never the record.
	Transcript io.Writer
}

// Exec runs the probe command in its own process group, kills the group
// with SIGKILL when Timeout passes (exit 137, the table's timeout), and
// classifies the result. A command that cannot be started maps to 127
// (not found) or 126 (not executable), as a shell would report it.
func Exec(ctx context.Context, o Options) Record {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	var out, errb capped
	cmd := exec.CommandContext(ctx, o.Args[0], o.Args[1:]...)
	cmd.Env = o.Env
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	code := 0
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			ws, _ := ee.Sys().(syscall.WaitStatus)
			if ws.Signaled() {
				code = 128 + int(ws.Signal())
			} else {
				code = ee.ExitCode()
			}
		case errors.Is(err, exec.ErrNotFound), errors.Is(err, os.ErrNotExist):
			code = 127
		default:
			code = 126
		}
	}
	if ctx.Err() != nil && code != 124 {
		// Ran past the deadline: the group was killed.
		code = 137
	}
	if o.Transcript != nil {
		o.Transcript.Write(out.Bytes())
		o.Transcript.Write(errb.Bytes())
	}
	rec := Classify(Run{ExitCode: code, Stdout: out.Bytes(), Stderr: errb.Bytes(), Sentinel: o.Sentinel})
	rec.CLI = o.CLI
	rec.TimeoutSeconds = o.Timeout.Seconds()
	rec.DurationMS = time.Since(start).Milliseconds()
	rec.CheckedAt = start.UTC().Format(time.RFC3339)
	return rec
}
