package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

func runCmd(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return out.String(), errb.String(), cli.Code(err)
}

var hermesSets = []string{
	"--set", "AGENT_USER=hermes",
	"--set", "MAC_HUB_HOST=hub.example.internal",
	"--set", "MAC_HUB_PORT=8080",
	"--set", "MODEL_GATEWAY_HOST=models.example.com",
}

func TestHelpAndUsage(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}, {"help", "check"}, {"check", "--help"}, {"render", "-h"}, {"resolve", "--help"}} {
		out, _, code := runCmd(t, "", args...)
		if code != 0 || !strings.Contains(out, "Usage:") || !strings.Contains(out, "Examples:") {
			t.Errorf("%v: code %d, output:\n%s", args, code, out)
		}
	}
	for _, args := range [][]string{{}, {"bogus"}, {"check"}, {"check", "a", "b"}, {"check", "--nope", "x"}, {"--log-format", "xml", "resolve"}, {"render"}, {"render", "--set", "NOEQUALS"}, {"resolve", "extra"}} {
		_, _, code := runCmd(t, "", args...)
		if code != cli.ExitUsage {
			t.Errorf("%v: code %d, want %d", args, code, cli.ExitUsage)
		}
	}
}

func TestCheckValid(t *testing.T) {
	out, _, code := runCmd(t, "", "check", "../../policies/default-policy.yaml")
	if code != 0 {
		t.Fatalf("code %d: %s", code, out)
	}
	sum := policy.Default().Checksum()
	if !strings.Contains(out, "# checksum: "+sum) {
		t.Errorf("checksum missing:\n%s", out)
	}
	// The printed normalised policy is itself a valid policy with the same checksum.
	p, err := policy.Parse([]byte(out))
	if err != nil || p.Checksum() != sum {
		t.Errorf("printed policy: %v", err)
	}

	out, _, code = runCmd(t, "", "check", "../../policies/default-policy.yaml", "--json")
	var res checkResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 0 {
		t.Fatalf("code %d, json %v: %s", code, err, out)
	}
	if !res.Valid || res.Checksum != sum || res.Policy == nil || res.Policy.Landlock.Compatibility != "hard_requirement" {
		t.Errorf("result = %+v", res)
	}

	// stdin.
	out, _, code = runCmd(t, "version: 1\n", "check", "-", "--json")
	if code != 0 || !strings.Contains(out, `"valid":true`) {
		t.Errorf("stdin: code %d %s", code, out)
	}
}

const brokenPolicy = `version: 1
filesystem_policy:
  read_write: [/]
process:
  run_as_user: root
network_policies:
  github:
    endpoints:
      - host: "*.com"
        port: 0
    binaries: [{path: git}]
`

func TestCheckListsEveryProblem(t *testing.T) {
	file := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(file, []byte(brokenPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"filesystem_policy.read_write[0] (line 3)",
		"process.run_as_user (line 5)",
		"network_policies.github.endpoints[0].host (line 9)",
		"network_policies.github.endpoints[0].port (line 10)",
		"network_policies.github.binaries[0].path (line 11)",
	}
	out, _, code := runCmd(t, "", "check", file)
	if code != cli.ExitFailed {
		t.Errorf("code %d", code)
	}
	if !strings.Contains(out, "5 problems") {
		t.Errorf("count missing:\n%s", out)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("missing %q in:\n%s", w, out)
		}
	}
	out, _, code = runCmd(t, "", "check", "--json", file)
	var res checkResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if code != cli.ExitFailed || res.Valid || len(res.Problems) != len(want) {
		t.Errorf("code %d result %+v", code, res)
	}

	// A missing file is a failure too; the error (printed by cli.Exit) names it.
	err := run(context.Background(), []string{"check", "/nonexistent/nope.yaml"}, nil, &bytes.Buffer{}, &bytes.Buffer{})
	if cli.Code(err) != cli.ExitFailed || !strings.Contains(err.Error(), "nope.yaml") {
		t.Errorf("missing file: %v", err)
	}
}

func TestCheckWorkdirFlag(t *testing.T) {
	file := filepath.Join(t.TempDir(), "p.yaml")
	src := "version: 1\nfilesystem_policy: {include_workdir: true}\nnetwork_policies:\n  t:\n    endpoints: [{host: example.com, port: 443}]\n    binaries: [{path: /srv/repo/bin/tool}]\n"
	if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, code := runCmd(t, "", "check", file); code != 0 {
		t.Errorf("without --workdir: code %d", code)
	}
	out, _, code := runCmd(t, "", "check", file, "--workdir", "/srv/repo")
	if code != cli.ExitFailed || !strings.Contains(out, "working directory /srv/repo") {
		t.Errorf("with --workdir: code %d\n%s", code, out)
	}
}

func TestResolve(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv(policy.EnvPolicy, "")

	out, _, code := runCmd(t, "", "resolve", "--json")
	var res resolveResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 0 {
		t.Fatalf("code %d %v: %s", code, err, out)
	}
	if res.Source != policy.SourceBundled || res.Checksum != policy.Default().Checksum() || res.Reason == "" {
		t.Errorf("bundled: %+v", res)
	}

	homeFile := filepath.Join(home, policy.HomePolicyPath)
	if err := os.MkdirAll(filepath.Dir(homeFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(homeFile, []byte("version: 1\nprocess: {run_as_user: \"1234\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, code = runCmd(t, "", "resolve")
	if code != 0 || !strings.Contains(out, "source:   home") || !strings.Contains(out, homeFile) {
		t.Errorf("home: code %d\n%s", code, out)
	}

	envFile := filepath.Join(t.TempDir(), "env.yaml")
	if err := os.WriteFile(envFile, []byte("version: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(policy.EnvPolicy, envFile)
	out, _, _ = runCmd(t, "", "resolve", "--json")
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Source != policy.SourceEnv || res.Path != envFile {
		t.Errorf("env: %+v %v", res, err)
	}
	out, _, _ = runCmd(t, "", "resolve", "--json", "--policy", homeFile)
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Source != policy.SourceFlag || res.Path != homeFile {
		t.Errorf("flag: %+v %v", res, err)
	}

	t.Setenv(policy.EnvPolicy, filepath.Join(home, "missing.yaml"))
	err := run(context.Background(), []string{"resolve"}, nil, &bytes.Buffer{}, &bytes.Buffer{})
	if cli.Code(err) != cli.ExitFailed || !strings.Contains(err.Error(), policy.EnvPolicy) || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing env file: %v", err)
	}
}

func TestRender(t *testing.T) {
	dir := t.TempDir()
	outFile := filepath.Join(dir, "policy.yaml")
	stdout, stderr, code := runCmd(t, "", append([]string{"render", "-o", outFile}, hermesSets...)...)
	if code != 0 {
		t.Fatalf("code %d: %s", code, stderr)
	}
	if stdout != "" {
		t.Errorf("stdout not empty with -o: %q", stdout)
	}
	st, err := os.Stat(outFile)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	p, err := policy.LoadFile(outFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, p.Checksum()) {
		t.Errorf("log lacks checksum: %s", stderr)
	}
	if p.NetworkPolicies["mac_hub"].Endpoints[0].Host != "hub.example.internal" {
		t.Errorf("hub host = %q", p.NetworkPolicies["mac_hub"].Endpoints[0].Host)
	}
	if left, _ := os.ReadDir(dir); len(left) != 1 {
		t.Errorf("temporary files left: %v", left)
	}

	// stdout, with an explicit template.
	tmpl := filepath.Join(dir, "t.yaml")
	if err := os.WriteFile(tmpl, []byte("version: 1\nprocess: {run_as_user: \"__UID__\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, _, code = runCmd(t, "", "render", "--template", tmpl, "--set", "UID=1500")
	if code != 0 || stdout != "version: 1\nprocess: {run_as_user: \"1500\"}\n" {
		t.Errorf("code %d stdout %q", code, stdout)
	}

	// Refusals leave no output file.
	bad := filepath.Join(dir, "bad.yaml")
	for name, args := range map[string][]string{
		"leftover placeholder": {"render", "-o", bad, "--set", "AGENT_USER=hermes"},
		"unknown key":          append([]string{"render", "-o", bad, "--set", "NOT_IN_TEMPLATE=x"}, hermesSets...),
		"invalid result":       {"render", "-o", bad, "--set", "AGENT_USER=hermes", "--set", "MAC_HUB_HOST=hub.example.internal", "--set", "MAC_HUB_PORT=99999", "--set", "MODEL_GATEWAY_HOST=models.example.com"},
		"injection":            {"render", "-o", bad, "--set", "AGENT_USER=hermes", "--set", "MAC_HUB_HOST=x\n  evil: 1", "--set", "MAC_HUB_PORT=8080", "--set", "MODEL_GATEWAY_HOST=models.example.com"},
		"missing template":     {"render", "--template", filepath.Join(dir, "none.yaml"), "--set", "A=1"},
	} {
		_, _, code := runCmd(t, "", args...)
		if code != cli.ExitFailed {
			t.Errorf("%s: code %d", name, code)
		}
		if _, err := os.Stat(bad); err == nil {
			t.Errorf("%s: output file written", name)
		}
	}
}
