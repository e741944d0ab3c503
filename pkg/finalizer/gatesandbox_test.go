package finalizer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/sandbox"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// sandboxedOpts is f's recovery request with the gates confined by the
// built sandbox-supervisor.
func sandboxedOpts(t *testing.T, f *fixture) Options {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireFeature(t, "landlock")
	o := f.opts()
	o.UnsandboxedGates = false
	o.GateSandbox = testutil.Binary(t, "sandbox-supervisor")
	o.Execute = true
	return o
}

// worldWritableDir is a directory any uid may write by ordinary
// permissions, outside /tmp (which the sandbox replaces by its own
// tmpfs): only Landlock can keep a gate out of it.
func worldWritableDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("/var/tmp", "palisade-finalizer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o777); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestSandboxedGatesConfinedAndPushed runs a real recovery whose gates run
// in sandbox-supervisor: the gate reports its identity, sees the rebased
// commit with its history, writes its own tree, and cannot write a
// world-writable host directory, the preserved repository or a host temp
// directory. Its success still leads to the push.
func TestSandboxedGatesConfinedAndPushed(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	o := sandboxedOpts(t, f)
	wantUID, wantGID, err := sandbox.ResolveIdentity("sandbox", "sandbox")
	if err != nil {
		t.Fatal(err)
	}
	escape := worldWritableDir(t)
	hostTmp := t.TempDir()
	if err := os.Chmod(hostTmp, 0o777); err != nil {
		t.Fatal(err)
	}
	targets := []string{filepath.Join(escape, "escaped"), filepath.Join(hostTmp, "escaped"), filepath.Join(f.repo, "escaped")}
	probe := fmt.Sprintf(`echo "gate-id=$(id -u):$(id -g)"
echo "gate-pwd=$(pwd)"
echo "gate-head=$(git rev-parse HEAD)"
git cat-file -e %s^{commit} && echo gate-history=ok
echo proof > gate-wrote.txt && echo gate-workdir-write=ok
for p in %s; do
  if (echo x > "$p") 2>/dev/null; then echo "gate-escaped=$p"; else echo "gate-denied=$p"; fi
done
test -f src/new.go && test -f docs/added.md
`, f.base, strings.Join(targets, " "))
	f.ev.VerificationCommands = [][]string{{"sh", "-c", probe}}
	f.saveEvidence()
	canonical := f.remoteMain()

	var out bytes.Buffer
	_, rec, err := Recover(context.Background(), f.ws, o, &out)
	t.Logf("gate output:\n%s", out.String())
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	pushed := f.remoteMain()
	if rec.Status != RecordPushed || rec.PushedCommit != pushed || pushed == canonical {
		t.Fatalf("record %+v; remote main %s (canonical was %s)", rec, pushed, canonical)
	}
	got := out.String()
	for _, want := range []string{
		fmt.Sprintf("gate-id=%d:%d\n", wantUID, wantGID),
		"gate-head=" + rec.RebasedHead + "\n",
		"gate-history=ok\n",
		"gate-workdir-write=ok\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("gate output lacks %q", want)
		}
	}
	if wantUID != 10001 {
		t.Logf("this host has a sandbox user: uid %d", wantUID)
	}
	if strings.Contains(got, "gate-escaped=") {
		t.Errorf("the gate wrote outside its tree")
	}
	for _, p := range targets {
		if !strings.Contains(got, "gate-denied="+p+"\n") {
			t.Errorf("the gate did not report a denied write to %s", p)
		}
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("the gate created %s on the host", p)
		}
	}
	// The gate clone is gone.
	m := regexp.MustCompile(`gate-pwd=(\S+)`).FindStringSubmatch(got)
	if m == nil || !strings.Contains(m[1], "finalizer-recover-gate-") {
		t.Fatalf("gate pwd not reported: %q", got)
	} else if _, err := os.Lstat(m[1]); err == nil {
		t.Errorf("gate clone %s left behind", m[1])
	}
	if !rec.GatesSandboxed || rec.GateSandbox != o.GateSandbox || rec.GatePolicy != "bundled:"+"default-policy.yaml" ||
		rec.GateUID != int(wantUID) || rec.GateGID != int(wantGID) || rec.GatePolicySHA256 != policy.Default().Checksum() {
		t.Errorf("record gate setup: sandboxed %v sandbox %q policy %q sha %q uid %d gid %d",
			rec.GatesSandboxed, rec.GateSandbox, rec.GatePolicy, rec.GatePolicySHA256, rec.GateUID, rec.GateGID)
	}
	data, err := os.ReadFile(filepath.Join(f.ws, RecordFile))
	if err != nil || !bytes.Contains(data, []byte(`"gates_sandboxed": true`)) {
		t.Errorf("record on disk lacks gates_sandboxed true: %s", data)
	}
	if len(rec.Gates) != 2 || rec.Gates[1].Argv[0] != "sh" {
		t.Errorf("gates %+v: argv must be the gate's own", rec.Gates)
	}
}

// TestSandboxedGateRefusals: a gate that fails, or modifies a tracked file,
// inside the sandbox refuses the recovery; nothing is pushed.
func TestSandboxedGateRefusals(t *testing.T) {
	cases := []struct {
		name, script, want string
	}{
		{"fails", "echo failing-in-sandbox uid=$(id -u); exit 3", "failed with exit code 3"},
		{"modifies a tracked file", "echo tampered >> README.md", "the verification[0] gate modified tracked files, so the tested tree is not the one to push: README.md (content changed)"},
		{"moves HEAD", "git -c user.name=g -c user.email=g@example.invalid commit -q --allow-empty -m moved", "the verification[0] gate moved HEAD of the gate clone"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, fixtureOpts{})
			o := sandboxedOpts(t, f)
			f.ev.VerificationCommands = [][]string{{"sh", "-c", c.script}}
			f.saveEvidence()
			before := f.remoteMain()
			var out bytes.Buffer
			_, rec, err := Recover(context.Background(), f.ws, o, &out)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Recover = %v, want %q\noutput: %s", err, c.want, out.String())
			}
			if rec == nil || rec.Status != RecordFailed || rec.FailedStep != StepGate || !rec.GatesSandboxed {
				t.Fatalf("record %+v", rec)
			}
			if f.remoteMain() != before {
				t.Fatal("the remote moved after a refused gate")
			}
			if c.name == "fails" && !strings.Contains(out.String(), "failing-in-sandbox uid=") || strings.Contains(out.String(), "uid=0\n") {
				t.Errorf("gate output %q", out.String())
			}
		})
	}
}

// TestSandboxNotCreatedRefuses: sandbox-supervisor exits 125 (here: the
// policy lets a network binary live under the gate clone, which the
// supervisor refuses) and recovery refuses at the gate_sandbox step; the
// gate never runs on the host.
func TestSandboxNotCreatedRefuses(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	o := sandboxedOpts(t, f)
	pol := filepath.Join(f.dir, "gate-policy.yaml")
	f.write(f.dir, "gate-policy.yaml", `version: 1
filesystem_policy:
  include_workdir: true
  read_only: [/usr, /bin, /lib, /etc]
  read_write: [/dev/null]
landlock:
  compatibility: hard_requirement
process:
  run_as_user: sandbox
  run_as_group: sandbox
network_policies:
  x:
    name: x
    endpoints:
      - host: example.invalid
        port: 443
    binaries:
      - path: `+filepath.Join(os.TempDir(), "**")+"\n", 0o600)
	o.GatePolicy = pol
	marker := filepath.Join(f.dir, "ran-on-host")
	f.ev.ContractCommand = []string{"sh", "-c", "touch " + marker + "; sh scripts/contract.sh"}
	f.ev.TestEvidence = []TestEvidence{{Argv: f.ev.ContractCommand, ExitCode: exitCodeP(0)}}
	f.saveEvidence()
	before := f.remoteMain()
	var out bytes.Buffer
	_, rec, err := Recover(context.Background(), f.ws, o, &out)
	if err == nil || !strings.Contains(err.Error(), "contract gate") || !strings.Contains(err.Error(), "exited 125") ||
		!strings.Contains(err.Error(), "refusing to run repository code on the host") || !strings.Contains(err.Error(), "can match files under the working directory") {
		t.Fatalf("Recover = %v\noutput: %s", err, out.String())
	}
	if rec.FailedStep != StepGateSandbox || rec.GatePolicy != pol || len(rec.Gates) != 1 || rec.Gates[0].ExitCode != 125 {
		t.Fatalf("record %+v", rec)
	}
	if _, err := os.Lstat(marker); err == nil {
		t.Fatal("the gate ran on the host")
	}
	if f.remoteMain() != before {
		t.Fatal("the remote moved")
	}
}

// TestSandboxedGateTimeout: a gate that outlives its timeout inside the
// sandbox is stopped by SIGTERM through the supervisor (well before the
// 10 s grace after which the supervisor would be killed) and the recovery
// fails at the gate step.
func TestSandboxedGateTimeout(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	o := sandboxedOpts(t, f)
	o.GateTimeout = time.Second
	f.ev.VerificationCommands = [][]string{{"sh", "-c", "sleep 60; echo survived"}}
	f.saveEvidence()
	_, rec, err := Recover(context.Background(), f.ws, o, nil)
	if err == nil || !strings.Contains(err.Error(), "timed out after 1s") {
		t.Fatalf("Recover = %v", err)
	}
	if len(rec.Gates) != 2 || !rec.Gates[1].TimedOut || rec.Gates[1].DurationMS >= 10000 {
		t.Fatalf("gates %+v", rec.Gates)
	}
}

// TestMissingGateSandboxRefuses: without a usable sandbox and without the
// opt-in, recovery is refused before anything runs (the refused helper
// proves nothing changed; the contract gate would leave a marker).
func TestMissingGateSandboxRefuses(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{})
	marker := filepath.Join(f.dir, "ran")
	f.ev.ContractCommand = []string{"sh", "-c", "touch " + marker + "; sh scripts/contract.sh"}
	f.ev.TestEvidence = []TestEvidence{{Argv: f.ev.ContractCommand, ExitCode: exitCodeP(0)}}
	f.saveEvidence()
	o := f.opts()
	o.UnsandboxedGates = false

	o.GateSandbox = filepath.Join(f.dir, "no-such-sandbox-supervisor")
	p := refused(t, f, o, "refusing to run repository code on the host: --gate-sandbox "+o.GateSandbox)
	if p.GateSetup != nil {
		t.Errorf("plan gate setup %+v", p.GateSetup)
	}

	f.write(f.dir, "not-executable", "#!/bin/sh\n", 0o644)
	o.GateSandbox = filepath.Join(f.dir, "not-executable")
	refused(t, f, o, "not an executable file")

	// The default lookup: nothing next to the test binary, nothing on PATH.
	empty := t.TempDir()
	o.GateSandbox = ""
	o.Env = append(append([]string{}, f.env...), "PATH="+empty)
	refused(t, f, o, "refusing to run repository code on the host: no sandbox-supervisor next to this executable")
	if _, err := os.Lstat(marker); err == nil {
		t.Fatal("a gate ran")
	}
}

func TestFindGateSandbox(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	noexec := t.TempDir()
	if err := os.WriteFile(filepath.Join(noexec, GateSandboxName), []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, GateSandboxName), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := findGateSandbox(strings.Join([]string{"relative", noexec, dir}, string(os.PathListSeparator)))
	if err != nil || got != filepath.Join(dir, GateSandboxName) {
		t.Fatalf("findGateSandbox = %q, %v", got, err)
	}
	// A relative PATH entry is never used, even when it holds one.
	rel, err := filepath.Rel(mustGetwd(t), dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := findGateSandbox(rel); err == nil {
		t.Fatalf("relative PATH entry used: %q", got)
	}
}

func mustGetwd(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}

// TestUnsandboxedGatesRecorded: the opt-in runs the gates on the host and
// the plan and record say so.
func TestUnsandboxedGatesRecorded(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{})
	marker := filepath.Join(f.dir, "ran-on-host")
	f.ev.VerificationCommands = [][]string{{"sh", "-c", "touch " + marker}}
	f.saveEvidence()
	o := f.opts()
	o.Execute = true
	plan, rec, err := Recover(context.Background(), f.ws, o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if plan.GateSetup == nil || plan.GateSetup.Sandboxed || !strings.Contains(strings.Join(plan.Steps, "\n"), "ON THE HOST, UNCONFINED") {
		t.Errorf("plan gate setup %+v, steps %q", plan.GateSetup, plan.Steps)
	}
	if rec.GatesSandboxed || rec.GateSandbox != "" || rec.GatePolicy != "" || rec.GateUID != os.Geteuid() {
		t.Errorf("record %+v", rec)
	}
	if _, err := os.Lstat(marker); err != nil {
		t.Errorf("the host gate did not run: %v", err)
	}
	data, _ := os.ReadFile(filepath.Join(f.ws, RecordFile))
	var raw map[string]any
	if json.Unmarshal(data, &raw) != nil || raw["gates_sandboxed"] != false {
		t.Errorf("record on disk: gates_sandboxed = %v", raw["gates_sandboxed"])
	}
}

// TestGateCloneChecks exercises the clone verification with host gates:
// the gate sees the rebased commit and its history; untracked output is
// fine; changing tracked content, modes, paths or HEAD is refused.
func TestGateCloneChecks(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, script, want string
	}{
		{"history and untracked output", `git cat-file -e BASE^{commit} && git log --format=%s | grep -qx "agent: implement feature" && mkdir -p build && echo o > build/out && echo o > untracked.txt`, ""},
		{"tracked content", "echo x >> feature.txt", "modified tracked files, so the tested tree is not the one to push: feature.txt (content changed)"},
		{"tracked content, same size", `printf 'base\nAGENT\n' > feature.txt`, "feature.txt (content changed)"},
		{"executable bit", "chmod +x README.md", "README.md (executable bit changed)"},
		{"deleted", "rm docs/added.md", "docs/added.md (missing)"},
		{"directory swapped for a symlink", "mv src src.real && ln -s src.real src", "src/new.go (src is no longer a directory)"},
		{"file swapped for a symlink", "mv README.md R && ln -s R README.md", "README.md (no longer a regular file)"},
		{"HEAD moved", "git checkout -q --detach HEAD~1", "moved HEAD of the gate clone"},
		{"HEAD on a branch", "git checkout -q -b x", `moved HEAD of the gate clone ("ref: refs/heads/x"`},
		{".git removed", "rm -rf .git", ".git is no longer a directory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, fixtureOpts{})
			f.ev.VerificationCommands = [][]string{{"sh", "-c", strings.ReplaceAll(c.script, "BASE", f.base)}}
			f.saveEvidence()
			before := f.remoteMain()
			o := f.opts()
			o.Execute = true
			var out bytes.Buffer
			_, rec, err := Recover(context.Background(), f.ws, o, &out)
			if c.want == "" {
				if err != nil || rec.Status != RecordPushed {
					t.Fatalf("Recover = %v; output %s", err, out.String())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Recover = %v, want %q; output %s", err, c.want, out.String())
			}
			if rec.FailedStep != StepGate || f.remoteMain() != before {
				t.Fatalf("record %+v; remote moved: %v", rec, f.remoteMain() != before)
			}
		})
	}
}

func TestTreeMismatchErrorTruncates(t *testing.T) {
	t.Parallel()
	var paths []string
	for i := range 25 {
		paths = append(paths, fmt.Sprintf("f%d", i))
	}
	msg := (&TreeMismatchError{Paths: paths}).Error()
	if !strings.HasSuffix(msg, "f19 and 5 more") || strings.Contains(msg, "f20") {
		t.Errorf("message %q", msg)
	}
}

// TestGateTreeVerify covers the clone check on symlinks and executables,
// and that the clone is a byte-for-byte checkout even when the tree asks
// for line-ending conversion.
func TestGateTreeVerify(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{})
	f.write(f.other, "run.sh", "#!/bin/sh\n", 0o755)
	if err := os.Symlink("run.sh", filepath.Join(f.other, "link")); err != nil {
		t.Fatal(err)
	}
	f.write(f.other, ".gitattributes", "*.txt text eol=crlf\n", 0o644)
	f.git(f.other, "add", ".")
	f.git(f.other, "commit", "-q", "-m", "links")
	head := f.git(f.other, "rev-parse", "HEAD")
	g := newGitRunner(f.other, f.env, DefaultIdentity)
	gt, err := prepareGateTree(context.Background(), g, f.other, head, &GateSetup{})
	if gt != nil {
		defer os.RemoveAll(gt.dir)
	}
	if err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(gt.dir, "canon.txt")); err != nil || string(data) != "canonical\n" {
		t.Fatalf("canon.txt checked out as %q, want the blob's bytes", data)
	}
	for _, c := range []struct {
		change func() error
		want   string
	}{
		{func() error {
			os.Remove(filepath.Join(gt.dir, "link"))
			return os.Symlink("feature.txt", filepath.Join(gt.dir, "link"))
		}, "link (content changed)"},
		{func() error {
			os.Remove(filepath.Join(gt.dir, "link"))
			return os.WriteFile(filepath.Join(gt.dir, "link"), []byte("run.sh"), 0o644)
		}, "link (no longer a symlink)"},
		{func() error { return os.Chmod(filepath.Join(gt.dir, "run.sh"), 0o644) }, "run.sh (executable bit changed)"},
	} {
		if err := gt.verify(); err != nil {
			t.Fatalf("untouched clone: %v", err)
		}
		if err := c.change(); err != nil {
			t.Fatal(err)
		}
		if err := gt.verify(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("verify = %v, want %q", err, c.want)
		}
		// Restore from the commit for the next case.
		f.git(gt.dir, "checkout", "-q", "--detach", "-f", head)
	}
}
