package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/probe"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

func runCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, strings.NewReader(""), &out, &errb)
	return out.String(), errb.String(), err
}

func TestHelpHasExamples(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"route", "--help"}} {
		out, errs, err := runCLI(t, args...)
		if cli.Code(err) != 0 || !strings.Contains(out+errs, "Examples:") {
			t.Errorf("%v: exit %d, help:\n%s%s", args, cli.Code(err), out, errs)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--frobnicate"},
		{"extra-arg"},
		{"--timeout", "-1s"},
		{"--log-format", "xml", "--inside"},
		{"route"},
		{"route", "--cli", "opencode", "--", "true"},
		{"route", "--sentinel", "S", "--", "true"},
		{"route", "--cli", "opencode", "--sentinel", "S"},
		{"route", "--cli", "opencode", "--sentinel", "S", "--timeout", "0s", "--", "true"},
	} {
		_, _, err := runCLI(t, args...)
		if cli.Code(err) != cli.ExitUsage {
			t.Errorf("%v: exit %d (%v), want 2", args, cli.Code(err), err)
		}
	}
}

// probeEnv is an environment in which the resolution order ends at the
// bundled default: HOME without ~/.mac/openshell-policy.yaml and no
// MAC_OPENSHELL_POLICY.
func probeEnv(home string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MAC_OPENSHELL_POLICY=") && !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	return append(env, "HOME="+home)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// The acceptance for the bundled default: the real binary starts a
// throwaway sandbox through the real sandbox-supervisor (next to it),
// every check passes, stdout and --log both end with
// CONFINEMENT_PROBE_OK.
func TestBundledDefaultPasses(t *testing.T) {
	testutil.RequireRoot(t)
	for _, f := range []string{"landlock", "seccomp", "nftables", "ns:net"} {
		testutil.RequireFeature(t, f)
	}
	bin := testutil.Binary(t, "confinement-probe")
	testutil.Binary(t, "sandbox-supervisor")
	testutil.Binary(t, "egress-proxy")
	home := t.TempDir()
	state := filepath.Join(t.TempDir(), "state")
	logPath := filepath.Join(t.TempDir(), "probe", "probe.log")
	cmd := exec.Command(bin, "--state-dir", state)
	cmd.Env = probeEnv(home)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || lastLine(string(out)) != probe.OKLine {
		t.Fatalf("exit %v, last line %q\nstdout:\n%s\nstderr:\n%s", err, lastLine(string(out)), out, stderr.String())
	}
	results, _ := probe.ParseResults(bytes.NewReader(out))
	if v := probe.Evaluate(probe.Catalog(), results, ""); !v.OK {
		t.Fatalf("verdict %+v", v.Failed)
	}
	for _, r := range results {
		if r.Group == probe.GroupEgress && strings.HasPrefix(r.Check, "proxy_") && !strings.Contains(r.Observed, `403 error="policy_denied"`) {
			t.Errorf("%s: %s, want the proxy's policy_denied (the canary entry brings the proxy up)", r.Check, r.Observed)
		}
	}
	// Issue 29 item 5: the probe's deliberate denials are the proxy
	// working, not warnings, and the proxy's lines stay in its own log
	// (a healthy run printed a screen of bypass_denied WARNs).
	if s := stderr.String(); strings.Contains(s, "level=WARN") || strings.Contains(s, "level=ERROR") || strings.Contains(s, "msg=connection") {
		t.Errorf("a healthy probe run warned or showed the proxy's lines:\n%s", s)
	}
	// Issue 29 item 6: without --log nothing is written (it created
	// ~/.mac/openshell/live-confinement-probe.log on every run).
	if ents, _ := os.ReadDir(home); len(ents) != 0 {
		t.Errorf("a run without --log wrote to HOME: %v", ents)
	}

	// --json: one summary object; --log gets the run.
	cmd = exec.Command(bin, "--state-dir", state, "--json", "--log", logPath)
	cmd.Env = probeEnv(home)
	out, err = cmd.Output()
	var sum struct {
		OK      bool           `json:"ok"`
		Result  string         `json:"result"`
		Checks  []probe.Result `json:"checks"`
		Sandbox struct {
			PolicySource string `json:"policy_source"`
			Canary       bool   `json:"canary_network_entry"`
		} `json:"sandbox"`
	}
	if err != nil || json.Unmarshal(out, &sum) != nil || !sum.OK || sum.Result != probe.OKLine || len(sum.Checks) != len(probe.Catalog()) {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	if sum.Sandbox.PolicySource != "bundled" || !sum.Sandbox.Canary {
		t.Errorf("--json sandbox %+v, want the bundled policy with the canary entry", sum.Sandbox)
	}
	log, err := os.ReadFile(logPath)
	if err != nil || lastLine(string(log)) != probe.OKLine {
		t.Fatalf("log: %v, last line %q", err, lastLine(string(log)))
	}
	if fi, _ := os.Stat(logPath); fi.Mode().Perm() != 0o600 {
		t.Errorf("log mode %v, want 0600", fi.Mode().Perm())
	}

	// No supervisor: the run fails closed and the log now ends with the
	// failure, never with the earlier OK.
	cmd = exec.Command(bin, "--state-dir", state, "--supervisor-bin", filepath.Join(t.TempDir(), "missing"), "--log", logPath)
	cmd.Env = probeEnv(home)
	out, err = cmd.Output()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("missing supervisor: %v\n%s", err, out)
	}
	log, _ = os.ReadFile(logPath)
	if lastLine(string(log)) != probe.FailedLine {
		t.Fatalf("log after a failed run ends %q", lastLine(string(log)))
	}
}

// A sandbox that cannot be created (the policy names an identity that
// is root) fails every check as unreported, exit 1.
func TestSandboxNotCreatedFails(t *testing.T) {
	bin, dir, pol := unreachableProbe(t)
	cmd := exec.Command(bin, "--policy", pol, "--state-dir", filepath.Join(dir, "state"), "--log", filepath.Join(dir, "log"))
	cmd.Env = probeEnv(dir)
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || lastLine(string(out)) != probe.FailedLine {
		t.Fatalf("exit %v, last line %q\n%s", err, lastLine(string(out)), out)
	}
	results, _ := probe.ParseResults(bytes.NewReader(out))
	for _, r := range results {
		if r.OK {
			t.Errorf("%s passed although the probe could not run in the sandbox", r.Check)
		}
	}
}

// Issue 16 item 8: --log /dev/fd/N appends to a descriptor the caller
// opened (a pipe here). It failed with "sync /dev/fd/3: invalid
// argument" (a pipe cannot be synced), and the probe exited on the log.
func TestLogToInheritedDescriptor(t *testing.T) {
	bin, dir, pol := unreachableProbe(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command(bin, "--policy", pol, "--state-dir", filepath.Join(dir, "state"), "--log", "/dev/fd/3")
	cmd.Env = probeEnv(dir)
	cmd.ExtraFiles = []*os.File{w}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	logged, _ := io.ReadAll(r)
	cmd.Wait()
	if strings.Contains(stderr.String(), "probe log") || lastLine(string(logged)) != probe.FailedLine || !strings.Contains(string(logged), `"probe_run"`) {
		t.Fatalf("log on fd 3:\n%s\nstderr:\n%s", logged, stderr.String())
	}
}

// unreachableProbe returns the probe binary, a directory and a policy
// under which the probe's inner command cannot run: valid, but
// workdir-less and without the probe's own directory.
func unreachableProbe(t *testing.T) (bin, dir, pol string) {
	t.Helper()
	testutil.RequireRoot(t)
	bin = testutil.Binary(t, "confinement-probe")
	testutil.Binary(t, "sandbox-supervisor")
	testutil.Binary(t, "egress-proxy")
	dir = t.TempDir()
	pol = filepath.Join(dir, "p.yaml")
	os.WriteFile(pol, []byte("version: 1\nfilesystem_policy:\n  include_workdir: false\n  read_only: [/etc]\n  read_write: [/tmp]\nlandlock:\n  compatibility: hard_requirement\nprocess:\n  run_as_user: sandbox\n  run_as_group: sandbox\nnetwork_policies: {}\n"), 0o600)
	return bin, dir, pol
}
