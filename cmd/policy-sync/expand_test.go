package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/egress"
	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

const lockWithEvil = `{"lockfileVersion":3,"packages":{
 "node_modules/a":{"resolved":"https://registry.npmjs.org/a/-/a-1.0.0.tgz"},
 "node_modules/b":{"resolved":"https://evil.example/b/-/b-1.0.0.tgz"}}}`

func expandFixture(t *testing.T) (base, repo string) {
	t.Helper()
	dir := t.TempDir()
	base = filepath.Join(dir, "base.yaml")
	if err := os.WriteFile(base, []byte(renderedPolicy(t, "hub.example.internal")), 0o600); err != nil {
		t.Fatal(err)
	}
	repo = filepath.Join(dir, "repo")
	os.Mkdir(repo, 0o755)
	if err := os.WriteFile(filepath.Join(repo, "package-lock.json"), []byte(lockWithEvil), 0o644); err != nil {
		t.Fatal(err)
	}
	return base, repo
}

// decisionFrom finds the one decision line on stderr.
func decisionFrom(t *testing.T, stderr string) egress.Decision {
	t.Helper()
	var found []egress.Decision
	for _, l := range strings.Split(stderr, "\n") {
		if strings.Contains(l, `"event":"sandbox_egress_decision"`) {
			var d egress.Decision
			if err := json.Unmarshal([]byte(l), &d); err != nil {
				t.Fatalf("decision line: %v: %s", err, l)
			}
			found = append(found, d)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d decision lines on stderr:\n%s", len(found), stderr)
	}
	return found[0]
}

func TestExpandCommand(t *testing.T) {
	base, repo := expandFixture(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "task.yaml")
	events := filepath.Join(dir, "events.jsonl")
	meta := filepath.Join(dir, "task.json")
	os.WriteFile(meta, []byte(`{"metadata":{"egress_contract":{"hosts":["artifacts.example.com","*.bad.example"]}}}`), 0o600)

	stdout, stderr, code := runCmd(t, "", "expand", "--base", base, "--repo", repo, "--task-metadata", meta, "-o", out, "--events", events)
	if code != 0 || stdout != "" {
		t.Fatalf("code %d stdout %q stderr %s", code, stdout, stderr)
	}
	d := decisionFrom(t, stderr)
	if !d.Expanded || len(d.Grants) != 2 || d.Error != "" {
		t.Fatalf("decision %+v", d)
	}
	st, err := os.Stat(out)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("output: %v %v", err, st)
	}
	p, err := policy.LoadFile(out)
	if err != nil || p.Checksum() != d.ResultPolicySHA256 {
		t.Fatalf("output policy: %v", err)
	}
	if p.NetworkPolicies[egress.EntryTrustedNPM] == nil || p.NetworkPolicies[egress.EntryHubDeclared] == nil {
		t.Errorf("entries: %v", p.NetworkPolicies)
	}
	refused := map[string]egress.Reason{}
	for _, r := range d.Refusals {
		refused[r.Host] = r.Reason
	}
	if refused["evil.example"] != egress.ReasonContractGap || refused["*.bad.example"] != egress.ReasonWildcard {
		t.Errorf("refusals %+v", d.Refusals)
	}

	// Second run to stdout: the events file gets a second line.
	stdout, stderr, code = runCmd(t, "", "expand", "--base", base, "--repo", repo, "--events", events)
	if code != 0 || !strings.Contains(stdout, egress.EntryTrustedNPM) {
		t.Fatalf("stdout run: code %d %s", code, stderr)
	}
	lines, _ := os.ReadFile(events)
	if n := bytes.Count(lines, []byte("\n")); n != 2 {
		t.Errorf("events file has %d lines, want 2", n)
	}
	if st, _ := os.Stat(events); st.Mode().Perm() != 0o600 {
		t.Errorf("events mode %v", st.Mode().Perm())
	}
}

func TestExpandCommandErrorsOutputBase(t *testing.T) {
	base, repo := expandFixture(t)
	baseText, _ := os.ReadFile(base)
	dir := t.TempDir()
	defaultBase := filepath.Join(dir, "default.yaml")
	os.WriteFile(defaultBase, []byte("# bundled default\nversion: 1\nnetwork_policies: {}\n"), 0o600)
	badTrusted := filepath.Join(dir, "trusted-bad.txt")
	os.WriteFile(badTrusted, []byte("registry.npmjs.org\n*.corp.example\n"), 0o600)
	badMeta := filepath.Join(dir, "meta-bad.json")
	os.WriteFile(badMeta, []byte(`{"metadata":{"egress_contract":{"hosts":"x.example.com"}}}`), 0o600)

	cases := []struct {
		name string
		base string
		args []string
		want string
	}{
		{"default never expanded", defaultBase, nil, "never expanded"},
		{"bad trusted list", base, []string{"--trusted-registries", badTrusted}, "line 2"},
		{"missing trusted list", base, []string{"--trusted-registries", filepath.Join(dir, "nope")}, "--trusted-registries"},
		{"bad metadata", base, []string{"--task-metadata", badMeta}, "metadata.egress_contract.hosts"},
		{"missing repo", base, []string{"--repo", filepath.Join(dir, "no-repo")}, "repository"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out.yaml")
			args := append([]string{"expand", "--base", c.base, "--repo", repo, "-o", out}, c.args...)
			_, stderr, code := runCmd(t, "", args...)
			if code != cli.ExitFailed {
				t.Fatalf("code %d, want 1: %s", code, stderr)
			}
			d := decisionFrom(t, stderr)
			if d.Expanded || !strings.Contains(d.Error, c.want) || len(d.Grants) != 0 {
				t.Errorf("decision %+v", d)
			}
			want, _ := os.ReadFile(c.base)
			if got, err := os.ReadFile(out); err != nil || !bytes.Equal(got, want) {
				t.Errorf("output is not the base unchanged: %v", err)
			}
			if d.BasePolicySHA256 == "" || d.ResultPolicySHA256 != d.BasePolicySHA256 {
				t.Errorf("checksums %s %s", d.BasePolicySHA256, d.ResultPolicySHA256)
			}
		})
	}
	_ = baseText

	// A trusted list that replaces the built-in one.
	trusted := filepath.Join(dir, "trusted.txt")
	os.WriteFile(trusted, []byte("# corp only\nnpm.corp.example\n"), 0o600)
	stdout, stderr, code := runCmd(t, "", "expand", "--base", base, "--repo", repo, "--trusted-registries", trusted)
	d := decisionFrom(t, stderr)
	if code != 0 || d.Expanded || !bytes.Equal([]byte(stdout), baseText) || d.TrustedRegistries != trusted {
		t.Errorf("replaced list: code %d %+v", code, d)
	}

	// No base at all: exit 1, nothing written, still one decision.
	out := filepath.Join(dir, "none.yaml")
	_, stderr, code = runCmd(t, "", "expand", "--base", filepath.Join(dir, "missing.yaml"), "--repo", repo, "-o", out)
	if code != cli.ExitFailed || decisionFrom(t, stderr).Error == "" {
		t.Errorf("missing base: code %d", code)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("output written without a base")
	}
	for _, args := range [][]string{{"expand", "--repo", repo}, {"expand", "--base", base}, {"expand", "--base", base, "--repo", repo, "extra"}} {
		if _, _, code := runCmd(t, "", args...); code != cli.ExitUsage {
			t.Errorf("%v: code %d", args, code)
		}
	}
}

// Issue 16 item 8: `expand --events /dev/fd/3` appends the decision to a
// descriptor the caller opened (a pipe here), through the real binary;
// a symlink planted at an --events path is refused.
func TestExpandEventsOnInheritedDescriptor(t *testing.T) {
	bin := testutil.Binary(t, "policy-sync")
	base, repo := expandFixture(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command(bin, "expand", "--base", base, "--repo", repo, "--events", "/dev/fd/3", "-o", filepath.Join(t.TempDir(), "task.yaml"))
	cmd.ExtraFiles = []*os.File{w}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err = cmd.Run()
	w.Close()
	if err != nil {
		t.Fatalf("expand --events /dev/fd/3: %v\n%s", err, errb.String())
	}
	data, _ := io.ReadAll(r)
	if n := bytes.Count(data, []byte(`"event":"sandbox_egress_decision"`)); n != 1 || !bytes.HasSuffix(data, []byte("\n")) {
		t.Fatalf("pipe got %d decisions: %q", n, data)
	}

	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere")
	os.WriteFile(target, nil, 0o600)
	link := filepath.Join(dir, "events.jsonl")
	os.Symlink(target, link)
	_, stderr, code := runCmd(t, "", "expand", "--base", base, "--repo", repo, "--events", link)
	if code != cli.ExitFailed {
		t.Errorf("--events through a symlink: exit %d, want 1; %s", code, stderr)
	}
	if b, _ := os.ReadFile(target); len(b) != 0 {
		t.Errorf("the symlink's target was written: %q", b)
	}
}

// Issue 16 item 5: an unknown command prints its error first, as one line
// with a hint, not after the whole usage (through the binary, as a user
// sees it).
func TestUnknownCommandIsOneLine(t *testing.T) {
	bin := testutil.Binary(t, "policy-sync")
	cmd := exec.Command(bin, "frobnicate")
	out, _ := cmd.CombinedOutput()
	s := strings.TrimSpace(string(out))
	if cmd.ProcessState.ExitCode() != 2 || strings.Contains(s, "\n") || !strings.Contains(s, `unknown command "frobnicate"`) || !strings.Contains(s, "--help") {
		t.Fatalf("exit %d, output:\n%s\nwant exit 2 and one line naming the command and --help", cmd.ProcessState.ExitCode(), out)
	}
}
