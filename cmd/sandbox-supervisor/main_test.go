package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/cgroup"
	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/feature"
	"github.com/palisade-sandbox/palisade/pkg/sandbox"
	"github.com/palisade-sandbox/palisade/pkg/state"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// The test binary is also the in-sandbox init of the sandboxes run()
// creates in-process (initExe).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == sandbox.InitCommand {
		sandbox.RunInit()
		return
	}
	if exe, err := os.Executable(); err == nil {
		initExe = exe
	}
	os.Exit(m.Run())
}

func runCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, strings.NewReader(""), &out, &errb)
	return out.String(), errb.String(), err
}

func TestHelpHasExamples(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"run", "--help"}, {"list", "--help"}, {"status", "--help"}, {"gc", "--help"}, {"preflight", "--help"}, {"exec", "--help"}, {"delete", "--help"}, {"logs", "--help"}, {"attach", "--help"}} {
		out, errs, err := runCLI(t, args...)
		if cli.Code(err) != 0 {
			t.Errorf("%v: exit %d", args, cli.Code(err))
		}
		if !strings.Contains(out+errs, "Examples:") {
			t.Errorf("%v: help has no examples:\n%s%s", args, out, errs)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"run"},
		{"run", "--tty", "--no-tty", "--", "true"},
		{"run", "--profile", "huge", "--", "true"},
		{"run", "--profile", "bounded-tmpfs", "--memory", "1g", "--", "true"},
		{"run", "--profile", "bounded-tmpfs", "--cpus", "2", "--", "true"},
		{"run", "--memory", "lots", "--", "true"},
		{"run", "--pids", "0", "--", "true"},
		{"run", "--kind", "weird", "--", "true"},
		{"run", "--attribution", "ebpf", "--", "true"},
		{"run", "--name", "../etc", "--", "true"},
		{"run", "--env", "HTTP_PROXY=http://evil", "--", "true"},
		{"status"},
		{"gc", "--stale-after", "-1h"},
		{"run", "--detach", "--tty"},
		{"run", "--json", "--", "true"},
		{"run", "--detach", "--events", "/dev/fd/3"},
		{"run", "--detach", "--events", "-"},
		{"run", "--status-fd", "2", "--", "true"},
		{"run", "--status-fd", "3", "--detach"},
		{"run", "--status-fd", "977", "--", "true"},
		{"exec"},
		{"exec", "sbx-1"},
		{"exec", "sbx-1", "--"},
		{"exec", "--env", "HTTPS_PROXY=http://evil", "sbx-1", "--", "true"},
		{"exec", "--workdir", "rel", "sbx-1", "--", "true"},
		{"delete"},
		{"delete", "a", "b"},
		{"logs"},
		{"attach"},
		{"logs", "--since", "-1m", "x"},
		{"logs", "--summary", "x"},
		{"logs", "--denied", "--summary", "--json", "x"},
		{"logs", "--denied", "--summary", "--interval", "0s", "x"},
	} {
		_, errs, err := runCLI(t, args...)
		if cli.Code(err) != cli.ExitUsage {
			t.Errorf("%v: exit %d (%v), want 2; stderr %s", args, cli.Code(err), err, errs)
		}
	}
}

// --allow-degraded may run without seccomp, which the eBPF fast path
// relies on: auto becomes proc; a named backend is kept.
func TestProxyAttributionUnderAllowDegraded(t *testing.T) {
	for _, tc := range []struct {
		degraded bool
		flag     string
		want     string
	}{{false, "auto", "auto"}, {true, "auto", "proc"}, {true, "bpf", "bpf"}, {false, "proc", "proc"}} {
		if got := proxyAttribution(&runFlags{allowDegraded: tc.degraded, attribution: tc.flag}); got != tc.want {
			t.Errorf("allow-degraded=%v --attribution %s: proxy gets %s, want %s", tc.degraded, tc.flag, got, tc.want)
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"512m": 512 << 20, "4g": 4 << 30, "4GiB": 4 << 30, "8388608": 8 << 20, "4096k": 4 << 20} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v", in, got, err)
		}
	}
	for _, bad := range []string{"x", "-1g", "1m", "0", "1.5g"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) accepted", bad)
		}
	}
}

func TestSpecPrintsConfig(t *testing.T) {
	wd := t.TempDir()
	out, errs, err := runCLI(t, "spec", "--workdir", wd, "--memory", "1g", "--", "/bin/true")
	if err != nil {
		t.Fatalf("%v: %s", err, errs)
	}
	var s struct {
		Process struct {
			User struct{ UID int } `json:"user"`
			Args []string
		}
		Linux struct {
			Namespaces []struct{ Type string }
			Resources  struct{ Memory struct{ Limit int64 } }
		}
		Annotations map[string]string
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatal(err)
	}
	if s.Process.User.UID == 0 || len(s.Linux.Namespaces) != 6 || s.Linux.Resources.Memory.Limit != 1<<30 || s.Annotations["io.palisade.policy.sha256"] == "" {
		t.Fatalf("spec %+v", s)
	}
}

// The hard_requirement abort path, through the preflight seam.
func TestHardRequirementAbortExit125(t *testing.T) {
	testutil.RequireRoot(t)
	probe = func(n string) error {
		if n == "landlock" {
			return &feature.MissingError{Feature: n, MinKernel: "5.13", Reason: "simulated"}
		}
		return feature.Check(n)
	}
	defer func() { probe = nil }()
	dir := t.TempDir()
	_, _, err := runCLI(t, "run", "--state-dir", filepath.Join(t.TempDir(), "state"), "--workdir", dir, "--", "/bin/true")
	if cli.Code(err) != 125 || !strings.Contains(err.Error(), "landlock") || !strings.Contains(err.Error(), "hard_requirement") {
		t.Fatalf("exit %d: %v", cli.Code(err), err)
	}
}

// sandboxDirs makes a workdir the sandbox user can write and a state root.
func sandboxDirs(t *testing.T) (string, string) {
	wd := t.TempDir()
	os.Chown(wd, 10001, 10001)
	return wd, filepath.Join(t.TempDir(), "state")
}

func TestBinaryExitCodesAndSignals(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFeature(t, "landlock")
	bin := testutil.Binary(t, "sandbox-supervisor")
	wd, st := sandboxDirs(t)
	for _, c := range []struct {
		cmd  string
		want int
	}{
		{"exit 0", 0}, {"exit 7", 7}, {"kill -KILL $$", 137}, {"kill -TERM $$", 143},
	} {
		cmd := exec.Command(bin, "run", "--state-dir", st, "--workdir", wd, "--", "/bin/sh", "-c", c.cmd)
		err := cmd.Run()
		if got := cmd.ProcessState.ExitCode(); got != c.want {
			t.Errorf("%q: exit %d (%v), want %d", c.cmd, got, err, c.want)
		}
	}
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"/nonexistent"}, 127}, {[]string{"/etc/passwd"}, 126},
	} {
		cmd := exec.Command(bin, append([]string{"run", "--state-dir", st, "--workdir", wd, "--"}, c.args...)...)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		cmd.Run()
		if got := cmd.ProcessState.ExitCode(); got != c.want {
			t.Errorf("%v: exit %d, want %d (%s)", c.args, got, c.want, errb.String())
		}
	}

	// Signal forwarding: SIGTERM to the supervisor reaches the command.
	cmd := exec.Command(bin, "run", "--state-dir", st, "--workdir", wd, "--", "/bin/sh", "-c",
		`trap 'exit 42' TERM; echo ready; i=0; while [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done; exit 1`)
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "ready\n" {
		t.Fatalf("got %q", line)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	if got := cmd.ProcessState.ExitCode(); got != 42 {
		t.Fatalf("after SIGTERM: exit %d, want 42 (trap ran)", got)
	}
}

// A supervisor killed with SIGKILL leaves no running sandbox process, and
// gc --apply removes what it left.
func TestSupervisorSIGKILLLeavesNoSurvivors(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFeature(t, "landlock")
	bin := testutil.Binary(t, "sandbox-supervisor")
	wd, st := sandboxDirs(t)
	name := testutil.UniqueName("kill-")
	cmd := exec.Command(bin, "run", "--state-dir", st, "--workdir", wd, "--name", name, "--", "/bin/sh", "-c", "echo ready; exec sleep 60")
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "ready\n" {
		t.Fatalf("got %q", line)
	}
	store, err := state.Open(st)
	if err != nil {
		t.Fatal(err)
	}
	// The supervisor records "running" and the init's pid after it told
	// the init to go, concurrently with the command's start: the
	// command's first line can come before the labels say so.
	var l state.Labels
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		l, err = store.Get(name)
		if err == nil && l.InitPID != 0 && l.Status == state.StatusRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("labels %+v, %v", l, err)
		}
	}
	procsFile := "/sys/fs/cgroup/pids/palisade/" + name + "/cgroup.procs"
	if b, _ := os.ReadFile(procsFile); len(strings.Fields(string(b))) < 2 {
		t.Fatalf("sandbox cgroup holds %q, want init and sleep", b)
	}
	cmd.Process.Kill()
	cmd.Wait()
	// How fast the kernel tears the PID namespace down is not the claim
	// (a loaded host takes seconds): that nothing survives is.
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(procsFile)
		if len(strings.TrimSpace(string(b))) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes survived the supervisor: %q", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The init is gone (or a zombie waiting for the host's reaper).
	for {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(l.InitPID) + "/stat")
		st2, _ := state.ProcStartTime(l.InitPID)
		if err != nil || st2 != l.InitStartTime || strings.Contains(string(b), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("init survived the supervisor")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// gc: dry run keeps it (too young), --stale-after 0 collects it.
	out, _, err := runCLI(t, "gc", "--state-dir", st)
	if err != nil || !strings.Contains(out, "keep    "+name) {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	out, _, err = runCLI(t, "gc", "--state-dir", st, "--stale-after", "1ns", "--apply")
	if err != nil || !strings.Contains(out, "removed "+name) {
		t.Fatalf("gc --apply: %v\n%s", err, out)
	}
	if _, err := os.Stat("/sys/fs/cgroup/pids/palisade/" + name); !os.IsNotExist(err) {
		t.Fatalf("cgroup left after gc: %v", err)
	}
	if _, err := store.Get(name); err == nil {
		t.Fatal("state left after gc")
	}
}

func TestKeepListStatus(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFeature(t, "landlock")
	wd, st := sandboxDirs(t)
	name := testutil.UniqueName("keep-")
	_, errs, err := runCLI(t, "run", "--state-dir", st, "--workdir", wd, "--name", name, "--keep", "--kind", "task", "--agent-id", "agent_x", "--", "/bin/sh", "-c", "exit 5")
	if cli.Code(err) != 5 {
		t.Fatalf("exit %d: %v %s", cli.Code(err), err, errs)
	}
	// The kept sandbox's full description is beside its labels, and
	// status --config shows it.
	var cfg struct {
		Spec     struct{ Hostname string }
		Landlock struct {
			ReadWrite []string `json:"ReadWrite"`
		}
		Seccomp             bool
		SeccompRules        int `json:"seccomp_rules"`
		SeccompInstructions int `json:"seccomp_instructions"`
	}
	if _, err := os.Stat(filepath.Join(st, name, sandbox.ConfigFile)); err != nil {
		t.Fatalf("kept sandbox has no %s: %v", sandbox.ConfigFile, err)
	}
	cfgOut, _, err := runCLI(t, "status", name, "--state-dir", st, "--config")
	if err != nil || json.Unmarshal([]byte(cfgOut), &cfg) != nil || cfg.Spec.Hostname != name || !cfg.Seccomp ||
		len(cfg.Landlock.ReadWrite) == 0 || cfg.SeccompRules < 60 || cfg.SeccompInstructions < cfg.SeccompRules {
		t.Fatalf("status --config: %v %s", err, cfgOut)
	}
	if _, _, err := runCLI(t, "status", name, "--state-dir", st, "--config", "--json"); cli.Code(err) != 2 {
		t.Fatalf("status --config --json: want usage error 2, got %v", err)
	}
	out, _, err := runCLI(t, "list", "--state-dir", st, "--json")
	var l state.Labels
	if err != nil || json.Unmarshal([]byte(out), &l) != nil || l.Name != name || l.Kind != "task" || !l.Keep || l.ExitCode == nil || *l.ExitCode != 5 || l.AgentID != "agent_x" {
		t.Fatalf("list: %v %s", err, out)
	}
	out, _, err = runCLI(t, "status", name, "--state-dir", st)
	if err != nil || !strings.Contains(out, "exit code:     5") {
		t.Fatalf("status: %v %s", err, out)
	}
	if _, _, err := runCLI(t, "status", "nope", "--state-dir", st); cli.Code(err) != 1 {
		t.Fatalf("status of a missing sandbox: %v", err)
	}
	// A taken name is an error.
	_, _, err = runCLI(t, "run", "--state-dir", st, "--workdir", wd, "--name", name, "--", "/bin/true")
	if cli.Code(err) != 125 || !strings.Contains(err.Error(), "taken") {
		t.Fatalf("taken name: %v", err)
	}
	// keep=true protects it from gc even when stale.
	out, _, _ = runCLI(t, "gc", "--state-dir", st, "--stale-after", "1ns", "--apply")
	if strings.Contains(out, "removed "+name) {
		t.Fatal("gc collected a keep=true sandbox")
	}
}

func TestPreflightJSON(t *testing.T) {
	testutil.RequireRoot(t)
	out, _, err := runCLI(t, "preflight", "--json")
	if err != nil {
		t.Fatalf("preflight on this machine: %v\n%s", err, out)
	}
	var pf struct {
		Features []struct {
			Name string
			OK   bool
		}
		LandlockABI int `json:"landlock_abi"`
	}
	if err := json.Unmarshal([]byte(out), &pf); err != nil || len(pf.Features) < 10 || pf.LandlockABI < 1 {
		t.Fatalf("%v %s", err, out)
	}
	var full struct {
		Landlock struct {
			ABI     int
			Handled string
			Scopes  string
			Logging string
		}
		Audit string
	}
	json.Unmarshal([]byte(out), &full)
	if full.Landlock.ABI != pf.LandlockABI || !strings.Contains(full.Landlock.Handled, "truncate") ||
		!strings.Contains(full.Landlock.Scopes, "signal") || full.Audit == "" ||
		(full.Landlock.ABI >= 7) != (full.Landlock.Logging == "new_exec_on") {
		t.Fatalf("preflight lacks the Landlock rights, scopes, logging or audit mode:\n%s", out)
	}
	// Audit unavailable: said so, and not a missing confinement feature.
	probe = func(n string) error {
		if n == "audit" {
			return &feature.MissingError{Feature: n, Reason: "simulated: no CAP_AUDIT_READ"}
		}
		return nil
	}
	out, _, err = runCLI(t, "preflight")
	if err != nil || !strings.Contains(out, "filesystem denial events: unavailable: simulated") {
		t.Fatalf("audit unavailable: %v\n%s", err, out)
	}
	probe = func(n string) error {
		if n == "seccomp" {
			return &feature.MissingError{Feature: n, MinKernel: "3.17", Reason: "simulated"}
		}
		return nil
	}
	defer func() { probe = nil }()
	out, _, err = runCLI(t, "preflight")
	if cli.Code(err) != 1 || !strings.Contains(out, "seccomp") || !strings.Contains(out, "MISSING") {
		t.Fatalf("missing seccomp: %v\n%s", err, out)
	}
}

const egressBase = `version: 1
filesystem_policy:
  include_workdir: true
  read_only: [/usr, /bin, /lib, /lib64, /etc]
  read_write: [/tmp]
landlock:
  compatibility: hard_requirement
process:
  run_as_user: sandbox
  run_as_group: sandbox
network_policies:
  github:
    endpoints:
      - host: github.com
        port: 443
        protocol: rest
        access: read-only
    binaries:
      - path: /usr/bin/git
`

// MAC_OPENSHELL_TASK_EGRESS=1 expands a task sandbox's policy from the
// repository: the trusted registry is granted, evil.example refused, and
// the decision record goes to stderr. Off, or for a verify sandbox, the
// base policy is used unchanged.
func TestTaskEgressExpansion(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.yaml")
	os.WriteFile(pol, []byte(egressBase), 0o600)
	wd := filepath.Join(dir, "repo")
	os.Mkdir(wd, 0o755)
	os.WriteFile(filepath.Join(wd, "package-lock.json"), []byte(`{"lockfileVersion":3,"packages":{
	  "node_modules/a":{"resolved":"https://registry.npmjs.org/a/-/a-1.0.0.tgz"},
	  "node_modules/b":{"resolved":"https://evil.example/b-1.0.0.tgz"}}}`), 0o644)
	state := filepath.Join(dir, "state")
	sha := func(kind string) (string, string) {
		var out, errb bytes.Buffer
		err := run(context.Background(), []string{"spec", "--policy", pol, "--workdir", wd, "--state-dir", state, "--kind", kind, "--", "/bin/true"}, strings.NewReader(""), &out, &errb)
		if err != nil {
			t.Fatalf("spec: %v %s", err, errb.String())
		}
		var s struct{ Annotations map[string]string }
		json.Unmarshal(out.Bytes(), &s)
		return s.Annotations["io.palisade.policy.sha256"], errb.String()
	}
	base, stderr := sha("task")
	if strings.Contains(stderr, "sandbox_egress_decision") {
		t.Fatalf("expansion ran without MAC_OPENSHELL_TASK_EGRESS: %s", stderr)
	}
	t.Setenv("MAC_OPENSHELL_TASK_EGRESS", "1")
	expanded, stderr := sha("task")
	if expanded == base || expanded == "" {
		t.Fatalf("policy not expanded (%s)", expanded)
	}
	if !strings.Contains(stderr, `"sandbox_egress_decision"`) || !strings.Contains(stderr, "registry.npmjs.org") || !strings.Contains(stderr, "evil.example") {
		t.Fatalf("decision record: %s", stderr)
	}
	if verify, _ := sha("verify"); verify != base {
		t.Fatal("a verify sandbox's policy was expanded")
	}
	// The temporary expanded policy does not outlive the command.
	if ents, _ := os.ReadDir(state); len(ents) != 0 {
		t.Fatalf("left in the state root: %v", ents)
	}
}

// A policy, hosts file, events file or state root the sandbox could
// change is refused before anything is created: an agent able to edit the policy
// the proxy hot-reloads would widen its own egress.
func TestTrustedFilesOutOfReach(t *testing.T) {
	dir := t.TempDir()
	wd := filepath.Join(dir, "work")
	os.Mkdir(wd, 0o755)
	inWD := filepath.Join(wd, "policy.yaml")
	os.WriteFile(inWD, []byte(egressBase), 0o600)
	safe := filepath.Join(dir, "policy.yaml")
	os.WriteFile(safe, []byte(egressBase), 0o600)
	for _, args := range [][]string{
		{"--policy", inWD},
		{"--policy", safe, "--hosts-file", filepath.Join(wd, "hosts")},
		{"--policy", safe, "--events", filepath.Join(wd, "events.jsonl")},
		{"--policy", safe, "--state-dir", filepath.Join(wd, ".palisade-state")},
	} {
		full := append(append([]string{"spec", "--workdir", wd}, args...), "--", "/bin/true")
		if err := run(context.Background(), full, strings.NewReader(""), io.Discard, io.Discard); cli.Code(err) != 125 || !strings.Contains(err.Error(), "can write") {
			t.Errorf("%v: %v, want exit 125 naming the writable location", args, err)
		}
	}
	full := []string{"spec", "--workdir", wd, "--policy", safe, "--events", filepath.Join(dir, "events.jsonl"), "--", "/bin/true"}
	if err := run(context.Background(), full, strings.NewReader(""), io.Discard, io.Discard); err != nil {
		t.Fatalf("safe files refused: %v", err)
	}
}

// A policy that does not validate, or a missing explicit policy, stops
// everything with 125 and names the problem; nothing falls back to a
// weaker source.
func TestBadPolicyFailsClosed(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("version: 1\nprocess:\n  run_as_user: \"0\"\nsurprise: true\n"), 0o600)
	for _, c := range []struct {
		args []string
		env  string
		want []string
	}{
		{[]string{"--policy", bad}, "", []string{"run_as_user", "surprise"}},
		{[]string{"--policy", filepath.Join(dir, "missing.yaml")}, "", []string{"missing.yaml"}},
		{nil, filepath.Join(dir, "missing-env.yaml"), []string{"MAC_OPENSHELL_POLICY"}},
	} {
		if c.env != "" {
			t.Setenv("MAC_OPENSHELL_POLICY", c.env)
		}
		args := append(append([]string{"spec", "--workdir", dir}, c.args...), "--", "/bin/true")
		err := run(context.Background(), args, strings.NewReader(""), io.Discard, io.Discard)
		if cli.Code(err) != 125 {
			t.Errorf("%v: exit %d (%v), want 125", c.args, cli.Code(err), err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %q does not mention %q", c.args, err, w)
			}
		}
	}
}

// A run whose policy does not load fails closed, and the cgroup and init
// prestarted from its command line are gone with it.
func TestBadPolicyRunLeavesNothing(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFeature(t, "cgroup")
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("version: 1\nsurprise: true\n"), 0o600)
	st := t.TempDir()
	name := testutil.UniqueName("bp-")
	var errb strings.Builder
	err := run(context.Background(), []string{"run", "--policy", bad, "--name", name, "--state-dir", st, "--workdir", dir, "--", "/bin/true"},
		strings.NewReader(""), io.Discard, &errb)
	if cli.Code(err) != 125 || !strings.Contains(err.Error(), "surprise") {
		t.Fatalf("exit %d (%v), want 125 naming the bad key", cli.Code(err), err)
	}
	if _, err := cgroup.Open(name); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("cgroup %s after a failed run: Open = %v, want not-exist", name, err)
	}
	if ents, _ := os.ReadDir(st); len(ents) != 0 {
		t.Fatalf("state left behind: %v", ents)
	}
}

// A supervisor killed after it prestarted the init but before it read its
// policy (held here by a FIFO that is never written) leaves no process;
// its state directory exists, so gc finds the sandbox and removes the
// cgroup with it.
func TestSIGKILLDuringPrestartIsCollected(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFeature(t, "cgroup:pids")
	bin := testutil.Binary(t, "sandbox-supervisor")
	wd, st := sandboxDirs(t)
	fifo := filepath.Join(t.TempDir(), "policy.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	name := testutil.UniqueName("pre-")
	cmd := exec.Command(bin, "run", "--policy", fifo, "--state-dir", st, "--workdir", wd, "--name", name, "--", "/bin/true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	procsFile := "/sys/fs/cgroup/pids/palisade/" + name + "/cgroup.procs"
	deadline := time.Now().Add(10 * time.Second)
	for {
		// The prestarted init is in its cgroup while the supervisor
		// waits for the policy.
		if b, err := os.ReadFile(procsFile); err == nil && len(strings.Fields(string(b))) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no prestarted init appeared")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(st, name)); err != nil {
		t.Fatalf("prestarted sandbox without a state directory: %v", err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	for {
		b, _ := os.ReadFile(procsFile)
		if len(strings.TrimSpace(string(b))) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the prestarted init survived the supervisor: %q", b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	out, _, err := runCLI(t, "gc", "--state-dir", st, "--stale-after", "1ns", "--apply")
	if err != nil || !strings.Contains(out, "removed "+name) {
		t.Fatalf("gc --apply: %v\n%s", err, out)
	}
	if _, err := os.Stat("/sys/fs/cgroup/pids/palisade/" + name); !os.IsNotExist(err) {
		t.Fatalf("cgroup left after gc: %v", err)
	}
}

// A SIGTERM that reaches the supervisor at any point of the sandbox's
// start is either handled — forwarded to the command once the init
// catches signals, so the run ends with the command's 42 (its trap) or 143
// — or it came before the supervisor caught signals, which it does before
// it creates anything: then it dies of it with nothing made. Either way
// nothing is left behind. (Before the init reported MsgReady, a forwarded
// signal was dropped by the kernel — PID 1 with a default disposition —
// or ended the init through the Go runtime's handler.)
func TestEarlySIGTERMIsHandled(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFeature(t, "landlock")
	bin := testutil.Binary(t, "sandbox-supervisor")
	wd, st := sandboxDirs(t)
	handled := 0
	// Fixed delays sweep the start on an idle host; on a loaded one the
	// supervisor may not catch signals within 12 ms, so the last run
	// signals once the sandbox's state directory exists: the supervisor
	// caught signals before it created it, so that SIGTERM must be
	// handled.
	stateMade := time.Duration(-1)
	for _, delay := range []time.Duration{0, 500 * time.Microsecond, time.Millisecond, 1500 * time.Microsecond, 2 * time.Millisecond,
		3 * time.Millisecond, 4 * time.Millisecond, 6 * time.Millisecond, 8 * time.Millisecond, 12 * time.Millisecond, stateMade} {
		name := testutil.UniqueName("term-")
		cmd := exec.Command(bin, "run", "--state-dir", st, "--workdir", wd, "--name", name, "--", "/bin/sh", "-c",
			`trap 'exit 42' TERM; i=0; while [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done; exit 1`)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if delay == stateMade {
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
				if _, err := os.Stat(filepath.Join(st, name)); err == nil {
					break
				}
				if time.Now().After(deadline) {
					cmd.Process.Kill()
					cmd.Wait()
					t.Fatal("the sandbox's state directory never appeared")
				}
			}
		} else {
			time.Sleep(delay)
		}
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("delay %v: the run did not end after SIGTERM", delay)
		}
		ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
		if delay == stateMade && ws.Signaled() {
			t.Fatal("SIGTERM after the state directory was made killed the supervisor: it catches signals too late")
		}
		if !ws.Signaled() {
			handled++
			if code := ws.ExitStatus(); code != 42 && code != 143 {
				t.Fatalf("delay %v: exit %d, want 42 or 143 (the signal reached the command)", delay, code)
			}
		}
		if _, err := os.Stat(filepath.Join(st, name)); !os.IsNotExist(err) {
			t.Fatalf("delay %v: state left behind (signaled %v): %v", delay, ws.Signaled(), err)
		}
		if _, err := os.Stat("/sys/fs/cgroup/pids/palisade/" + name); !os.IsNotExist(err) {
			t.Fatalf("delay %v: cgroup left behind (signaled %v): %v", delay, ws.Signaled(), err)
		}
	}
	if handled == 0 {
		t.Fatal("no SIGTERM during start-up was handled: the supervisor catches signals too late")
	}
}
