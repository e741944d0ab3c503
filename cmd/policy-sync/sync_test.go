package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/hub"
	"github.com/palisade-sandbox/palisade/pkg/hub/hubtest"
	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/policysync"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

func renderedPolicy(t *testing.T, hubHost string) string {
	t.Helper()
	out, err := policy.Render(mustTemplate(t), map[string]string{
		"AGENT_USER": "hermes", "MAC_HUB_HOST": hubHost, "MAC_HUB_PORT": "8080", "MODEL_GATEWAY_HOST": "models.example.com",
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func mustTemplate(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("../../policies/mac-hermes-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func hubAssignment(t *testing.T, text string, version int64) hub.Policy {
	t.Helper()
	p, err := policy.Parse([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return hub.Policy{PolicyText: text, Version: version, Checksum: p.Checksum()}
}

type syncEnv struct {
	srv   *hubtest.Server
	token string
	home  string
	args  []string
}

func newSyncEnv(t *testing.T) *syncEnv {
	t.Helper()
	srv := hubtest.Start(t)
	tok, err := srv.TokenFile(t.TempDir(), "worker-1")
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv(policy.EnvPolicy, "")
	t.Setenv(policysync.EnvSync, "")
	return &syncEnv{srv: srv, token: tok, home: home, args: []string{"--hub", srv.URL, "--agent-id", "worker-1", "--token-file", tok, "--timeout", "2s"}}
}

func (e *syncEnv) installed() string { return filepath.Join(e.home, ".mac", "openshell-policy.yaml") }

func decodeResult(t *testing.T, out string) policysync.Result {
	t.Helper()
	var r policysync.Result
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("stdout is not one result: %v\n%s", err, out)
	}
	return r
}

func TestOnceCommand(t *testing.T) {
	e := newSyncEnv(t)
	text := renderedPolicy(t, "hub-a.example.internal")
	e.srv.Assign("worker-1", hubAssignment(t, text, 1))

	out, errOut, code := runCmd(t, "", append([]string{"once", "--json"}, e.args...)...)
	if r := decodeResult(t, out); code != 0 || r.Outcome != policysync.OutcomeInstalled || !r.Reported {
		t.Fatalf("code %d result %+v stderr %s", code, r, errOut)
	}
	data, err := os.ReadFile(e.installed())
	if err != nil || string(data) != text {
		t.Fatalf("installed: %v", err)
	}
	st, _ := os.Stat(e.installed())
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", st.Mode().Perm())
	}

	out, _, code = runCmd(t, "", append([]string{"once", "--json"}, e.args...)...)
	if r := decodeResult(t, out); code != 0 || r.Outcome != policysync.OutcomeAlreadyConverged || r.Wrote {
		t.Fatalf("second run: code %d %+v", code, r)
	}

	// Fail safe: exit 1, reason on stderr and in the JSON, file untouched.
	e.srv.Assign("worker-1", hubAssignment(t, renderedPolicy(t, "hub-b.example.internal"), 2))
	e.srv.Fail(hubtest.Failure{Route: hubtest.RoutePolicy, Code: 500})
	out, errOut, code = runCmd(t, "", append([]string{"once", "--json"}, e.args...)...)
	r := decodeResult(t, out)
	if code != cli.ExitFailed || r.Outcome != policysync.OutcomeFailedSafe || r.Failure != policysync.FailHubError {
		t.Fatalf("500: code %d %+v", code, r)
	}
	if !strings.Contains(errOut, "failed safe") || !strings.Contains(errOut, "HTTP 500") || !strings.Contains(errOut, "kept the installed policy") {
		t.Errorf("stderr does not say why:\n%s", errOut)
	}
	if data, _ := os.ReadFile(e.installed()); string(data) != text {
		t.Error("installed file changed on 500")
	}
	tok, _ := os.ReadFile(e.token)
	if strings.Contains(out+errOut, strings.TrimSpace(string(tok))) {
		t.Error("token printed")
	}

	// Human output (no --json): nothing on stdout, exit 1 on the hub being down.
	e.srv.SetDown(true)
	out, errOut, code = runCmd(t, "", append([]string{"once"}, e.args...)...)
	if code != cli.ExitFailed || out != "" || !strings.Contains(errOut, "hub_unreachable") {
		t.Errorf("down: code %d stdout %q stderr %s", code, out, errOut)
	}
}

func TestOnceOverrideAndDisabled(t *testing.T) {
	e := newSyncEnv(t)
	e.srv.Assign("worker-1", hubAssignment(t, renderedPolicy(t, "hub-a.example.internal"), 1))
	override := filepath.Join(t.TempDir(), "operator.yaml")
	os.WriteFile(override, []byte("version: 1\n"), 0o600)
	t.Setenv(policy.EnvPolicy, override)
	out, errOut, code := runCmd(t, "", append([]string{"once", "--json"}, e.args...)...)
	if r := decodeResult(t, out); code != 0 || r.Outcome != policysync.OutcomeOverride || r.Wrote {
		t.Fatalf("override: code %d %+v", code, r)
	}
	if !strings.Contains(errOut, "override in force") {
		t.Errorf("stderr: %s", errOut)
	}
	if data, _ := os.ReadFile(override); string(data) != "version: 1\n" {
		t.Error("override file overwritten")
	}
	if _, err := os.Stat(e.installed()); err == nil {
		t.Error("home policy written under an override")
	}

	t.Setenv(policy.EnvPolicy, "")
	t.Setenv(policysync.EnvSync, "0")
	before := len(e.srv.Requests())
	out, errOut, code = runCmd(t, "", append([]string{"once"}, e.args...)...)
	if code != 0 || !strings.Contains(errOut, "disabled") || out != "" {
		t.Errorf("disabled: code %d stdout %q stderr %s", code, out, errOut)
	}
	if len(e.srv.Requests()) != before {
		t.Error("disabled sync talked to the hub")
	}
	if _, err := os.Stat(e.installed()); err == nil {
		t.Error("disabled sync installed a policy")
	}
}

func TestSyncUsageErrors(t *testing.T) {
	e := newSyncEnv(t)
	for _, args := range [][]string{
		{"once"},
		{"once", "--hub", e.srv.URL, "--agent-id", "worker-1"},
		{"once", "--hub", e.srv.URL, "--token-file", e.token},
		{"once", "--hub", e.srv.URL, "--agent-id", "../etc", "--token-file", e.token},
		{"once", "extra", "--hub", e.srv.URL, "--agent-id", "worker-1", "--token-file", e.token},
		{"watch", "--interval", "1ms", "--hub", e.srv.URL, "--agent-id", "worker-1", "--token-file", e.token},
		{"once", "--timeout", "0s", "--hub", e.srv.URL, "--agent-id", "worker-1", "--token-file", e.token},
	} {
		if _, errOut, code := runCmd(t, "", args...); code != cli.ExitUsage {
			t.Errorf("%v: code %d, want 2 (%s)", args, code, errOut)
		}
	}
	// A missing token file is a failure, not a usage error, and names the flag's file.
	err := run(context.Background(), []string{"once", "--hub", e.srv.URL, "--agent-id", "worker-1", "--token-file", filepath.Join(t.TempDir(), "nope")}, strings.NewReader(""), io.Discard, io.Discard)
	if cli.Code(err) != cli.ExitFailed || !strings.Contains(fmt.Sprint(err), "token file") {
		t.Errorf("missing token: %v", err)
	}
	for _, c := range []string{"once", "watch", "expand"} {
		out, _, code := runCmd(t, "", "help", c)
		if code != 0 || !strings.Contains(out, "Usage: policy-sync "+c) || !strings.Contains(out, "Examples:\n  policy-sync "+c) {
			t.Errorf("help %s: code %d\n%s", c, code, out)
		}
	}
}

// The real binary: watch installs, keeps running through a hub outage,
// picks up a reassignment, and exits 0 on SIGTERM and on SIGINT.
func TestWatchBinarySurvivesOutageAndStopsOnSignal(t *testing.T) {
	bin := testutil.Binary(t, "policy-sync")
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			e := newSyncEnv(t)
			a := renderedPolicy(t, "hub-a.example.internal")
			b := renderedPolicy(t, "hub-b.example.internal")
			e.srv.Assign("worker-1", hubAssignment(t, a, 1))
			cmd := exec.Command(bin, append([]string{"watch", "--interval", "100ms", "--json"}, e.args...)...)
			cmd.Env = append(os.Environ(), "HOME="+e.home, policy.EnvPolicy+"=", policysync.EnvSync+"=")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			results := make(chan policysync.Result, 1000)
			go func() {
				sc := bufio.NewScanner(stdout)
				for sc.Scan() {
					var r policysync.Result
					if json.Unmarshal(sc.Bytes(), &r) == nil {
						select {
						case results <- r:
						default:
						}
					}
				}
				exited <- cmd.Wait()
			}()
			t.Cleanup(func() {
				if cmd.ProcessState == nil {
					cmd.Process.Kill()
				}
			})
			wait := func(what string, cond func(policysync.Result) bool) {
				t.Helper()
				deadline := time.After(20 * time.Second)
				for {
					select {
					case r := <-results:
						if cond(r) {
							return
						}
					case err := <-exited:
						t.Fatalf("watch exited (%v) while waiting for %s\n%s", err, what, stderr.String())
					case <-deadline:
						t.Fatalf("timed out waiting for %s\n%s", what, stderr.String())
					}
				}
			}
			wait("install", func(r policysync.Result) bool { return r.Outcome == policysync.OutcomeInstalled })
			e.srv.SetDown(true)
			n := 0
			wait("failures", func(r policysync.Result) bool {
				if r.Failure == policysync.FailHubUnreachable {
					n++
				}
				return n >= 2
			})
			if data, _ := os.ReadFile(e.installed()); string(data) != a {
				t.Fatal("outage changed the installed file")
			}
			e.srv.Assign("worker-1", hubAssignment(t, b, 2))
			e.srv.SetDown(false)
			wait("reassignment", func(r policysync.Result) bool {
				return r.Outcome == policysync.OutcomeInstalled && r.DesiredVersion == 2
			})

			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-exited:
				if err != nil {
					t.Fatalf("exit after %v: %v\n%s", sig, err, stderr.String())
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("watch did not exit on %v", sig)
			}
			if data, _ := os.ReadFile(e.installed()); string(data) != b {
				t.Error("reassignment not on disk")
			}
		})
	}
}
