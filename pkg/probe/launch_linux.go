//go:build linux

package probe

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/sandbox"
)

func besideSelf(name string) (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find %s next to this binary: %w", name, err)
	}
	return filepath.Join(filepath.Dir(exe), name), nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Launch starts a throwaway sandbox (kind probe) through sandbox-supervisor
// with the policy a real sandbox would get, runs this binary's checks in
// it (--inside) and returns the verdict over what it reported. An error
// means the sandbox could not be set up at all; a sandbox that failed to
// start or a probe that died yields a failed verdict naming every check
// that went unreported.
func Launch(ctx context.Context, o LaunchOptions) (Verdict, Launched, error) {
	var info Launched
	resolved, err := policy.Resolve(policy.ResolveOptions{Flag: o.Policy})
	if err != nil {
		return Verdict{}, info, err
	}
	info.PolicySource, info.PolicyPath, info.PolicySHA256 = string(resolved.Source), resolved.Path, resolved.Policy.Checksum()
	text, canary, err := ProbePolicy(resolved.Policy)
	if err != nil {
		return Verdict{}, info, err
	}
	info.Canary = canary
	sup := o.Supervisor
	if sup == "" {
		if sup, err = besideSelf("sandbox-supervisor"); err != nil {
			return Verdict{}, info, err
		}
	}
	if _, err := os.Stat(sup); err != nil {
		return Verdict{}, info, fmt.Errorf("sandbox-supervisor: %w (use --supervisor-bin)", err)
	}
	self := o.ProbeBin
	if self == "" {
		if self, err = os.Executable(); err != nil {
			return Verdict{}, info, fmt.Errorf("find this binary: %w", err)
		}
	}
	uid, gid, err := sandbox.ResolveIdentity(resolved.Policy.Process.RunAsUser, resolved.Policy.Process.RunAsGroup)
	if err != nil {
		return Verdict{}, info, err
	}
	// The policy file is root's (0600) in a directory the sandbox user can
	// traverse but not list or change; the working directory is the
	// sandbox user's and holds a copy of this binary, so the probe can run
	// whatever the policy's read-only paths are.
	tmp, err := os.MkdirTemp(o.TempDir, "palisade-probe-")
	if err != nil {
		return Verdict{}, info, fmt.Errorf("probe directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o711); err != nil {
		return Verdict{}, info, fmt.Errorf("probe directory: %w", err)
	}
	policyPath := filepath.Join(tmp, "policy.yaml")
	if err := os.WriteFile(policyPath, text, 0o600); err != nil {
		return Verdict{}, info, fmt.Errorf("probe policy: %w", err)
	}
	work := filepath.Join(tmp, "work")
	if err := os.Mkdir(work, 0o700); err != nil {
		return Verdict{}, info, fmt.Errorf("probe workdir: %w", err)
	}
	inner := filepath.Join(work, "confinement-probe")
	if err := copyFile(self, inner, 0o755); err != nil {
		return Verdict{}, info, fmt.Errorf("copy %s into the probe workdir: %w", self, err)
	}
	if err := os.Chown(work, int(uid), int(gid)); err != nil {
		return Verdict{}, info, fmt.Errorf("probe workdir: %w", err)
	}
	if !resolved.Policy.Filesystem.IncludeWorkdir {
		// Without include_workdir the copy is unreachable; use the
		// installed binary and let the run prove whether it can start.
		inner = self
	}
	var rb [6]byte
	rand.Read(rb[:])
	info.Sandbox = "probe-" + hex.EncodeToString(rb[:])
	targets := TargetsFor(PolicyPaths{
		ReadOnly: resolved.Policy.Filesystem.ReadOnly, ReadWrite: resolved.Policy.Filesystem.ReadWrite,
		IncludeWorkdir: resolved.Policy.Filesystem.IncludeWorkdir, Workdir: work,
	})
	args := []string{"run", "--kind", "probe", "--name", info.Sandbox, "--policy", policyPath,
		"--workdir", work, "--env-passthrough", ""}
	if o.StateDir != "" {
		args = append(args, "--state-dir", o.StateDir)
	}
	if o.LogFormat != "" {
		args = append(args, "--log-format", o.LogFormat)
	}
	args = append(args, "--", inner, "--inside")
	args = append(args, targets.Args()...)
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(rctx, sup, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = o.Stderr
	cmd.Dir = work
	runErr := cmd.Run()
	why := ""
	if runErr != nil {
		var ee *exec.ExitError
		switch {
		case errors.As(runErr, &ee):
			info.ExitCode = ee.ExitCode()
			why = fmt.Sprintf("sandbox-supervisor exited %d", info.ExitCode)
			if info.ExitCode == sandbox.ExitSandboxFailed {
				why += " (the sandbox could not be created; its reason is on stderr)"
			}
			if ee.ExitCode() < 0 {
				why = "sandbox-supervisor: " + ee.Error()
			}
		default:
			return Verdict{}, info, fmt.Errorf("run %s: %w", sup, runErr)
		}
		if rctx.Err() != nil {
			why = fmt.Sprintf("timed out after %s", timeout)
		}
	}
	results, err := ParseResults(&out)
	if err != nil {
		why += "; output: " + err.Error()
	}
	return Evaluate(Catalog(), results, why), info, nil
}
