//go:build linux

package sandboxnet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/nettest"
	"github.com/palisade-sandbox/palisade/pkg/ocsf/ocsftest"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// The real agent CLIs, installed from the npm registry inside a sandbox
// through the proxy (npm read-only, policies/examples/npm.yaml), start
// confined and are decided when they reach for their model API. The
// model APIs are never contacted: the runs that reach for them use
// --hosts-file, from which alone the proxy resolves, and it maps
// api.openai.com and api.anthropic.com to a TEST-NET address of the
// test's own internet namespace (its HTTPS server answers any name with
// a certificate of the test CA, which the proxy is given as its upstream
// bundle); names outside the file resolve nowhere.

// Pinned releases: the binary paths the policies name are the packages'.
const (
	codexPkg  = "@openai/codex@0.171.0"
	claudePkg = "@anthropic-ai/claude-code@2.1.197"
	codexBin  = "node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"
	claudeBin = "node_modules/@anthropic-ai/claude-code/bin/claude.exe"
)

// agentsPolicy lets each CLI's own executable reach its model API with
// the rules of an agent example policy (the inference routes only,
// inspected), and names ROOT, where the CLIs are installed, read-only.
const agentsPolicy = `version: 1
filesystem_policy:
  include_workdir: true
  read_only: [/usr, /bin, /sbin, /lib, /lib64, /etc, ROOT, /dev/random, /dev/urandom, /dev/zero]
  read_write: [/tmp, /dev/null]
landlock:
  compatibility: hard_requirement
process:
  run_as_user: sandbox
  run_as_group: sandbox
network_policies:
NETWORK`

const agentsNetwork = `  openai_api:
    endpoints:
      - host: api.openai.com
        port: 443
        protocol: rest
        rules:
          - allow: {method: GET, path: /v1/responses}
          - allow: {method: POST, path: /v1/responses}
          - allow: {method: GET, path: /v1/models}
    binaries:
      - path: ROOT/` + codexBin + `
  anthropic_api:
    endpoints:
      - host: api.anthropic.com
        port: 443
        protocol: rest
        rules:
          - allow: {method: POST, path: /v1/messages}
          - allow: {method: POST, path: /v1/messages/count_tokens}
    binaries:
      - path: ROOT/` + claudeBin + `
`

// agentsNothing allows neither CLI anything.
const agentsNothing = `  nothing:
    endpoints:
      - host: nothing.invalid
        port: 443
    binaries:
      - path: /usr/bin/true
`

// agentsScript starts both CLIs and has each make one model request.
const agentsScript = `
export HOME=/tmp
B=ROOT/node_modules/.bin
printf 'codex_version=%s\n' "$($B/codex --version 2>&1 | tail -1)"
printf 'claude_version=%s\n' "$(timeout 60 $B/claude --version 2>&1 | tail -1)"
printf 'codex_help=%s\n' "$($B/codex --help 2>&1 | grep -c Usage)"
printf 'claude_help=%s\n' "$(timeout 60 $B/claude --help 2>&1 | grep -c Usage)"
timeout 25 $B/codex exec --dangerously-bypass-approvals-and-sandbox --skip-git-repo-check hi </dev/null >/tmp/codex.log 2>&1
printf 'codex_log=%s\n' "$(tail -3 /tmp/codex.log | tr '\n' ' ')"
timeout 25 $B/claude -p hi </dev/null >/tmp/claude.log 2>&1
printf 'claude_log=%s\n' "$(tail -3 /tmp/claude.log | tr '\n' ' ')"
`

func TestAgentCLIsConfined(t *testing.T) {
	testutil.RequireReachable(t, "the npm registry", "registry.npmjs.org:443")
	requirePaths(t, "node and npm (Debian packages nodejs and npm)", "/usr/bin/node")
	testutil.RequireCommand(t, "npm")
	reg := newRegistryLab(t, "npm.yaml")
	r := reg.run(fmt.Sprintf(`HOME=/tmp npm install --no-audit --no-fund --prefix ./agents %s %s >/tmp/npm.log 2>&1
printf 'npm=%%s %%s\n' "$?" "$(tail -2 /tmp/npm.log | tr '\n' ' ')"`, codexPkg, claudePkg))
	if !strings.HasPrefix(r["npm"], "0 ") {
		t.Fatalf("npm install: %q", r["npm"])
	}
	// Installed as an operator would: moved out of the workdir into a
	// directory only root writes (code the sandbox can write is foreign
	// and loses its binary's rights).
	root, err := os.MkdirTemp("/var/tmp", "palisade-agents-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Rename(filepath.Join(reg.wd, "agents", "node_modules"), filepath.Join(root, "node_modules")); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chown", "-R", "root:root", root).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v %s", err, out)
	}
	if out, err := exec.Command("chmod", "-R", "go-w,a+rX", root).CombinedOutput(); err != nil {
		t.Fatalf("chmod: %v %s", err, out)
	}
	inet := nettest.NewInternet(t)
	hosts := inet.HostsFile(map[string]string{
		"api.openai.com":    inet.V4[0].String(),
		"api.anthropic.com": inet.V4[0].String(),
	})
	run := func(network string) (map[string]string, []map[string]any) {
		t.Helper()
		dir := t.TempDir()
		pol := filepath.Join(dir, "policy.yaml")
		text := strings.ReplaceAll(strings.Replace(agentsPolicy, "NETWORK", network, 1), "ROOT", root)
		if err := os.WriteFile(pol, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		events := filepath.Join(dir, "events.jsonl")
		cmd := exec.Command(reg.sup, "run", "--policy", pol, "--hosts-file", hosts, "--upstream-ca-bundle", inet.CAFile(),
			"--events", events, "--state-dir", filepath.Join(dir, "state"), "--workdir", reg.wd,
			"--env", "OPENAI_API_KEY=sk-test-not-a-key", "--env", "ANTHROPIC_API_KEY=sk-ant-test-not-a-key",
			"--env", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
			"--", "/bin/sh", "-c", strings.ReplaceAll(agentsScript, "ROOT", root))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		t.Logf("sandbox output:\n%s", out)
		if err != nil {
			t.Fatalf("sandbox run: %v\n%s", err, stderr.String())
		}
		data, _ := os.ReadFile(events)
		ocsftest.ValidateLines(t, data)
		var evs []map[string]any
		for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
			var m map[string]any
			if json.Unmarshal(line, &m) == nil {
				evs = append(evs, m)
			}
		}
		return results(out), evs
	}

	// Allowed by the agents' policy: each CLI's request reaches the
	// inspecting proxy, is allowed by its rule and goes to the test
	// internet (an answer it cannot use: the attempt then fails).
	r, evs := run(agentsNetwork)
	for k, want := range map[string]string{"codex_version": "codex-cli 0.171.0", "claude_version": "2.1.197 (Claude Code)", "codex_help": "1", "claude_help": "1"} {
		if r[k] != want {
			t.Errorf("%s = %q, want %q", k, r[k], want)
		}
	}
	codex, claude := filepath.Join(root, codexBin), filepath.Join(root, claudeBin)
	for _, c := range []struct{ bin, host string }{{codex, "api.openai.com"}, {claude, "api.anthropic.com"}} {
		if !agentEvent(evs, c.bin, c.host, "allowed") {
			t.Errorf("no allowed request of %s to %s in the events", c.bin, c.host)
		}
	}
	reached := map[string]bool{}
	for _, h := range inet.Hits() {
		reached[h.SNI] = true
	}
	if !reached["api.openai.com"] || !reached["api.anthropic.com"] {
		t.Errorf("the test internet saw SNI %v, want api.openai.com and api.anthropic.com (through the proxy)", reached)
	}

	// Without the entries: each attempt is refused, with an event naming
	// the CLI's executable.
	r, evs = run(agentsNothing)
	if r["codex_version"] != "codex-cli 0.171.0" || r["claude_version"] != "2.1.197 (Claude Code)" {
		t.Errorf("versions without network: %q, %q", r["codex_version"], r["claude_version"])
	}
	for _, c := range []struct{ bin, host string }{{codex, "api.openai.com"}, {claude, "api.anthropic.com"}} {
		if !agentEvent(evs, c.bin, c.host, "policy_denied") {
			t.Errorf("no policy_denied event for %s to %s", c.bin, c.host)
		}
	}
}

// agentEvent reports whether evs hold a network or HTTP event with
// status to host by binary bin.
func agentEvent(evs []map[string]any, bin, host, status string) bool {
	for _, e := range evs {
		if e["status_code"] != status || (e["class_uid"] != float64(4001) && e["class_uid"] != float64(4002)) {
			continue
		}
		dst, _ := e["dst_endpoint"].(map[string]any)
		a, _ := e["actor"].(map[string]any)
		p, _ := a["process"].(map[string]any)
		f, _ := p["file"].(map[string]any)
		if dst["hostname"] == host && f["path"] == bin {
			return true
		}
	}
	return false
}
