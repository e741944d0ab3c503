package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/ceiling"
	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/policysync"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// runErr is runCmd with the returned error's text (what main prints).
func runErr(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, strings.NewReader(""), &out, &errb)
	msg := errb.String()
	if err != nil {
		msg += err.Error()
	}
	return msg, cli.Code(err)
}

// writeRootCeiling writes text as a ceiling root owns (mode 0600) in a
// directory of its own, as /etc/palisade would be.
func writeRootCeiling(t *testing.T, text string) string {
	t.Helper()
	testutil.RequireRoot(t)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	p := filepath.Join(dir, "ceiling.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// withoutEntry is the rendered fleet policy less one network entry.
func withoutEntry(t *testing.T, text, key string) string {
	p, err := policy.Parse([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	delete(p.NetworkPolicies, key)
	return string(p.YAML())
}

// Every policy-sync entry point refuses a policy beyond the ceiling and
// names the first excess: check, resolve, render, expand, once; the
// ceiling comes from --ceiling or $PALISADE_CEILING_FILE.
func TestCeilingRefusedAtEveryEntryPoint(t *testing.T) {
	full := renderedPolicy(t, "hub-a.example.internal")
	ceil := writeRootCeiling(t, withoutEntry(t, full, "github"))
	excess := "network_policies.github.endpoints[0]: host api.github.com not within the ceiling"
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	os.WriteFile(pol, []byte(full), 0o600)

	out, _, code := runCmd(t, "", "check", "--ceiling", ceil, pol)
	if code != cli.ExitFailed || !strings.Contains(out, excess+" (ceiling "+ceil+")") {
		t.Errorf("check: code %d\n%s", code, out)
	}
	if out, _, code := runCmd(t, "", "check", "--ceiling", ceil, ceil); code != 0 {
		t.Errorf("check of the ceiling itself: code %d\n%s", code, out)
	}

	t.Setenv(ceiling.EnvPath, ceil)
	errOut, code := runErr(t, "resolve", "--policy", pol)
	if code != cli.ExitFailed || !strings.Contains(errOut, "policy exceeds the ceiling "+ceil+": "+excess) {
		t.Errorf("resolve: code %d\n%s", code, errOut)
	}

	rendered := filepath.Join(t.TempDir(), "rendered.yaml")
	errOut, code = runErr(t, append([]string{"render", "-o", rendered}, hermesSets...)...)
	if code != cli.ExitFailed || !strings.Contains(errOut, excess) {
		t.Errorf("render: code %d\n%s", code, errOut)
	}
	if _, err := os.Stat(rendered); err == nil {
		t.Error("render wrote a policy beyond the ceiling")
	}

	out, errOut, code = runCmd(t, "", "expand", "--base", pol, "--repo", t.TempDir())
	if code != cli.ExitFailed || !strings.Contains(errOut, excess) || out != full {
		t.Errorf("expand: code %d\n%s", code, errOut)
	}

	e := newSyncEnv(t)
	e.srv.Assign("worker-1", hubAssignment(t, full, 1))
	out, _, code = runCmd(t, "", append([]string{"once", "--json"}, e.args...)...)
	if r := decodeResult(t, out); code != cli.ExitFailed || r.Failure != policysync.FailCeiling || !strings.Contains(r.Reason, excess) {
		t.Errorf("once: code %d %+v", code, r)
	}
	if _, err := os.Stat(e.installed()); err == nil {
		t.Error("once installed a policy beyond the ceiling")
	}

	// propose never proposes beyond the ceiling; apply-proposal refuses a
	// proposal made without it, and writes nothing.
	base := filepath.Join(t.TempDir(), "base.yaml")
	os.WriteFile(base, []byte(withoutEntry(t, full, "github")), 0o600)
	events := filepath.Join(t.TempDir(), "events.jsonl")
	os.WriteFile(events, []byte(`{"class_uid":4001,"activity_id":1,"action_id":2,"time":1,"status_code":"policy_denied","status_detail":"no_matching_endpoint","metadata":{"uid":"s"},"actor":{"process":{"file":{"path":"/usr/bin/git"}}},"dst_endpoint":{"hostname":"api.github.com","port":443}}`+"\n"), 0o600)
	out, _, code = runCmd(t, "", "propose", "--events", events, "--policy", base)
	if code != 0 || !strings.Contains(out, "proposed_git") || !strings.Contains(out, "policy exceeds the ceiling "+ceil+": network_policies.proposed_git.endpoints[0]: host api.github.com not within the ceiling") {
		t.Errorf("propose under the ceiling: %d\n%s", code, out)
	}
	t.Setenv(ceiling.EnvPath, "")
	wide, _, _ := runCmd(t, "", "propose", "--events", events, "--policy", base, "--ceiling", filepath.Join(t.TempDir(), "none.yaml"))
	if strings.Contains(wide, "api.github.com") {
		// A named ceiling that does not exist is an error, not "none".
		t.Errorf("propose with a missing --ceiling proposed: %s", wide)
	}
	wide, errOut, code = runCmd(t, "", "propose", "--events", events, "--policy", base)
	if code != 0 || !strings.Contains(wide, "op: add_entry") {
		t.Fatalf("propose without a ceiling: %d %s\n%s", code, errOut, wide)
	}
	prop := filepath.Join(t.TempDir(), "proposal.yaml")
	os.WriteFile(prop, []byte(wide), 0o600)
	before, _ := os.ReadFile(base)
	_, errOut, code = runCmd(t, "", "apply-proposal", prop, "--approve", "--policy", base, "--ceiling", ceil)
	if code != cli.ExitFailed || !strings.Contains(errOut, `"stage":"refused"`) || !strings.Contains(errOut, "host api.github.com not within the ceiling") {
		t.Errorf("apply-proposal beyond the ceiling: %d\n%s", code, errOut)
	}
	if after, _ := os.ReadFile(base); string(after) != string(before) {
		t.Error("apply-proposal wrote a policy beyond the ceiling")
	}
	t.Setenv(ceiling.EnvPath, ceil)

	// A ceiling that is not root's own stops everything.
	os.Chown(ceil, 65534, 65534)
	if errOut, code := runErr(t, "resolve", "--policy", ceil); code != cli.ExitFailed || !strings.Contains(errOut, "not root") {
		t.Errorf("a ceiling nobody owns: code %d\n%s", code, errOut)
	}
}
