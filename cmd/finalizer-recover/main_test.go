package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/finalizer"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

type ws struct {
	t      *testing.T
	env    []string
	remote string
	dir    string
}

func (w *ws) git(dir string, args ...string) string {
	w.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(append([]string{}, w.env...), "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=A", "GIT_AUTHOR_EMAIL=a@example.invalid", "GIT_COMMITTER_NAME=A", "GIT_COMMITTER_EMAIL=a@example.invalid")
	out, err := cmd.CombinedOutput()
	if err != nil {
		w.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// newWorkspace builds a workspace whose finalizer refused one untracked
// file, new.txt, against a real bare remote.
func newWorkspace(t *testing.T) *ws {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	os.Mkdir(home, 0o700)
	w := &ws{t: t, env: []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "TMPDIR=" + dir}}
	baseEnv = func() []string { return w.env }
	t.Cleanup(func() { baseEnv = finalizer.DefaultEnv })
	w.remote = filepath.Join(dir, "remote.git")
	w.git(dir, "init", "-q", "--bare", "-b", "main", w.remote)
	w.dir = filepath.Join(dir, "ws")
	repo := filepath.Join(w.dir, "repo")
	w.git(dir, "clone", "-q", "--no-hardlinks", w.remote, repo)
	w.git(repo, "checkout", "-q", "-b", "main")
	os.WriteFile(filepath.Join(repo, "a.txt"), []byte("a\n"), 0o644)
	w.git(repo, "add", "a.txt")
	w.git(repo, "commit", "-q", "-m", "base")
	w.git(repo, "push", "-q", "origin", "main")
	base := w.git(repo, "rev-parse", "HEAD")
	os.WriteFile(filepath.Join(repo, "new.txt"), []byte("new\n"), 0o644)
	ev := map[string]any{
		"schema": finalizer.EvidenceSchema, "evidence_id": "ev_7", "task_id": "task_7",
		"prepared_base_sha": base, "preserved_head_sha": base, "canonical_branch": "main",
		"remote": "origin", "remote_url": w.remote,
		"contract_command":      []string{"test", "-f", "new.txt"},
		"verification_commands": [][]string{{"test", "-f", "a.txt"}},
		"test_evidence":         []map[string]any{{"argv": []string{"test", "-f", "new.txt"}, "exit_code": 0}},
		"status":                "refused", "refusal_reason": "new_files", "finalizer_interrupted": false,
	}
	data, _ := json.Marshal(ev)
	os.WriteFile(filepath.Join(w.dir, finalizer.EvidenceFile), data, 0o644)
	return w
}

func invoke(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, strings.NewReader(""), &out, &errb)
	if err != nil {
		errb.WriteString("error: " + err.Error() + "\n")
	}
	return out.String(), errb.String(), cli.Code(err)
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"inspect", "-h"}, {"x", "--evidence-id", "e", "--help"}} {
		out, _, code := invoke(t, args...)
		if code != 0 || !strings.Contains(out, "Examples:") || !strings.Contains(out, "--approve-new-file") {
			t.Errorf("%q: exit %d, %q", args, code, out)
		}
	}
}

func TestUsage(t *testing.T) {
	w := newWorkspace(t)
	for _, args := range [][]string{
		{},
		{"inspect"},
		{"inspect", w.dir, "extra"},
		{"inspect", w.dir, "--execute"},
		{w.dir},
		{w.dir, "--evidence-id", "ev_7"}, // no --remote
		{w.dir, "--evidence-id", "ev_7", "--remote", w.remote, "--identity", "no email"},
		{w.dir, "--evidence-id", "ev_7", "--remote", w.remote, "--gate-timeout", "0s"},
		{w.dir, "--evidence-id", "ev_7", "--bogus"},
		{w.dir, "--evidence-id", "ev_7", "--remote", w.remote, "--unsandboxed-gates", "--gate-sandbox", "/bin/true"},
		{w.dir, "--evidence-id", "ev_7", "--remote", w.remote, "--unsandboxed-gates", "--gate-policy", "p.yaml"},
	} {
		_, errOut, code := invoke(t, args...)
		if code != cli.ExitUsage {
			t.Errorf("%q: exit %d, want 2 (%s)", args, code, errOut)
		}
	}
}

func TestInspectDryRunExecute(t *testing.T) {
	w := newWorkspace(t)
	out, errOut, code := invoke(t, "inspect", w.dir, "--json")
	var plan finalizer.Plan
	if code != 0 || json.Unmarshal([]byte(out), &plan) != nil {
		t.Fatalf("inspect --json: exit %d, %q, %q", code, out, errOut)
	}
	if plan.Mode != finalizer.ModeRefusedNewFiles || len(plan.NewFiles) != 1 || plan.NewFiles[0] != "new.txt" || plan.PreservedEvidence == nil {
		t.Fatalf("plan %+v", plan)
	}
	out, _, code = invoke(t, "inspect", w.dir)
	if code != 0 || !strings.Contains(out, "new files (each needs --approve-new-file): 1") || !strings.Contains(out, "preserved_test_evidence:") {
		t.Fatalf("inspect text: exit %d\n%s", code, out)
	}

	_, errOut, code = invoke(t, w.dir, "--evidence-id", "ev_7", "--remote", w.remote, "--unsandboxed-gates")
	if code != 1 || !strings.Contains(errOut, "unapproved new files") || !strings.Contains(errOut, "new.txt") {
		t.Fatalf("dry run without approval: exit %d, %q", code, errOut)
	}
	out, errOut, code = invoke(t, w.dir, "--evidence-id", "ev_7", "--remote", w.remote, "--approve-new-file", "new.txt", "--unsandboxed-gates")
	if code != 0 || !strings.Contains(errOut, "add --execute") || !strings.Contains(out, "recoverable:") ||
		!strings.Contains(out, "UNSANDBOXED: on the host") || !strings.Contains(errOut, "--unsandboxed-gates: the contract and verification commands") {
		t.Fatalf("dry run: exit %d, %q, %q", code, out, errOut)
	}
	before := w.git(w.dir, "--git-dir", w.remote, "rev-parse", "main")

	out, errOut, code = invoke(t, "--execute", w.dir, "--approve-new-file", "new.txt", "--evidence-id", "ev_7", "--remote", w.remote, "--json",
		"--identity", "Ops Person <ops@example.invalid>", "--record", filepath.Join(w.dir, "rec.json"), "--unsandboxed-gates")
	var res struct {
		Record   finalizer.Record `json:"record"`
		Executed bool             `json:"executed"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || !res.Executed || res.Record.Status != finalizer.RecordPushed {
		t.Fatalf("execute: exit %d, %q, %q", code, out, errOut)
	}
	if res.Record.GatesSandboxed || !strings.Contains(errOut, "ON THE HOST") {
		t.Errorf("--unsandboxed-gates: record gates_sandboxed %v, stderr %q", res.Record.GatesSandboxed, errOut)
	}
	if data, err := os.ReadFile(filepath.Join(w.dir, "rec.json")); err != nil || !strings.Contains(string(data), `"gates_sandboxed": false`) {
		t.Errorf("record file: %s, %v", data, err)
	}
	after := w.git(w.dir, "--git-dir", w.remote, "rev-parse", "main")
	if after == before || after != res.Record.PushedCommit {
		t.Fatalf("remote main %s (before %s), record %s", after, before, res.Record.PushedCommit)
	}
	if who := w.git(w.dir, "--git-dir", w.remote, "log", "-1", "--format=%an <%ae>|%cn", "main"); who != "Ops Person <ops@example.invalid>|Ops Person" {
		t.Errorf("recovery commit identity %q", who)
	}
	if _, err := os.Stat(filepath.Join(w.dir, "rec.json")); err != nil {
		t.Errorf("--record not honoured: %v", err)
	}
	// The workspace is now recovered; inspect says so and exits 1.
	_, errOut, code = invoke(t, "inspect", w.dir)
	if code != 1 || !strings.Contains(errOut, "not recoverable") {
		t.Errorf("inspect after recovery: exit %d, %q", code, errOut)
	}
}

// TestNoSandboxRefused: without --unsandboxed-gates and without a usable
// sandbox-supervisor, the recovery is refused and nothing moves.
func TestNoSandboxRefused(t *testing.T) {
	w := newWorkspace(t)
	empty := t.TempDir()
	w.env = append(w.env, "PATH="+empty) // the default lookup finds nothing
	before := w.git(w.dir, "--git-dir", w.remote, "rev-parse", "main")
	for _, extra := range [][]string{{}, {"--gate-sandbox", filepath.Join(empty, "sandbox-supervisor")}} {
		args := append([]string{w.dir, "--evidence-id", "ev_7", "--remote", w.remote, "--approve-new-file", "new.txt", "--execute"}, extra...)
		_, errOut, code := invoke(t, args...)
		if code != 1 || !strings.Contains(errOut, "refusing to run repository code on the host") || !strings.Contains(errOut, "--unsandboxed-gates") {
			t.Errorf("%q: exit %d, %q", extra, code, errOut)
		}
	}
	if after := w.git(w.dir, "--git-dir", w.remote, "rev-parse", "main"); after != before {
		t.Fatal("the remote moved")
	}
	if _, err := os.Stat(filepath.Join(w.dir, finalizer.RecordFile)); err == nil {
		t.Fatal("a refused recovery wrote a record")
	}
}

// TestSandboxedExecute runs the CLI end to end with the gates in the built
// sandbox-supervisor.
func TestSandboxedExecute(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFeature(t, "landlock")
	sup := testutil.Binary(t, "sandbox-supervisor")
	w := newWorkspace(t)
	before := w.git(w.dir, "--git-dir", w.remote, "rev-parse", "main")
	out, errOut, code := invoke(t, w.dir, "--evidence-id", "ev_7", "--remote", w.remote, "--approve-new-file", "new.txt", "--execute", "--json", "--gate-sandbox", sup)
	var res struct {
		Record finalizer.Record `json:"record"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Record.Status != finalizer.RecordPushed {
		t.Fatalf("execute: exit %d, %q, %q", code, out, errOut)
	}
	if !res.Record.GatesSandboxed || res.Record.GateSandbox != sup || res.Record.GateUID == 0 || strings.Contains(errOut, "ON THE HOST") {
		t.Errorf("record %+v; stderr %q", res.Record, errOut)
	}
	if after := w.git(w.dir, "--git-dir", w.remote, "rev-parse", "main"); after == before || after != res.Record.PushedCommit {
		t.Fatalf("remote main %s (before %s), record %s", after, before, res.Record.PushedCommit)
	}
}

// TestRemoteRequired: recovery needs --remote (a usage error naming the
// flag), and the evidence's remote_url must equal it (a refusal naming
// both); inspect takes it optionally and says whether it matched.
func TestRemoteRequired(t *testing.T) {
	w := newWorkspace(t)
	_, errOut, code := invoke(t, w.dir, "--evidence-id", "ev_7", "--approve-new-file", "new.txt", "--unsandboxed-gates")
	if code != cli.ExitUsage || !strings.Contains(errOut, "--remote URL is required") {
		t.Errorf("without --remote: exit %d, %q", code, errOut)
	}
	other := filepath.Join(filepath.Dir(w.remote), "other.git")
	w.git(filepath.Dir(w.remote), "clone", "-q", "--bare", w.remote, other)
	_, errOut, code = invoke(t, w.dir, "--evidence-id", "ev_7", "--remote", other, "--approve-new-file", "new.txt", "--unsandboxed-gates", "--execute")
	if code != 1 || !strings.Contains(errOut, `remote_url "`+w.remote+`"`) || !strings.Contains(errOut, `does not match --remote "`+other+`"`) {
		t.Errorf("mismatch: exit %d, %q", code, errOut)
	}
	out, _, code := invoke(t, "inspect", w.dir)
	if code != 0 || !strings.Contains(out, "NOT verified: recovery needs --remote") {
		t.Errorf("inspect without --remote: exit %d\n%s", code, out)
	}
	out, _, code = invoke(t, "inspect", w.dir, "--remote", w.remote)
	if code != 0 || !strings.Contains(out, "equals --remote") {
		t.Errorf("inspect with --remote: exit %d\n%s", code, out)
	}
	if _, errOut, code = invoke(t, "inspect", w.dir, "--remote", other); code != 1 || !strings.Contains(errOut, "does not match --remote") {
		t.Errorf("inspect with another --remote: exit %d, %q", code, errOut)
	}
}
