package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/routeproof"
)

// fakeCLI writes a small shell script standing in for a coding CLI.
func fakeCLI(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fake-cli")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

const sentinel = "PALISADE-SENTINEL-7f3a"

// secret is an inference token the fake CLIs see and print; it must
// never reach the record.
const secret = "mac-inf-tok-s3cr3t-0123456789"

func routeRecord(t *testing.T, extra []string, cmd ...string) (routeproof.Record, string, error) {
	t.Helper()
	t.Setenv("MAC_INFERENCE_TOKEN", secret)
	args := append([]string{"route", "--cli", "opencode", "--sentinel", sentinel}, extra...)
	args = append(args, "--")
	args = append(args, cmd...)
	out, errs, err := runCLI(t, args...)
	var rec routeproof.Record
	if jerr := json.Unmarshal([]byte(out), &rec); jerr != nil {
		t.Fatalf("record %q is not JSON: %v (stderr %s)", out, jerr, errs)
	}
	if strings.Contains(out, secret) || strings.Contains(out, "sk-live") {
		t.Errorf("record leaks a secret: %s", out)
	}
	if strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Errorf("record is not one line: %q", out)
	}
	return rec, out, err
}

// One fake CLI per failure class of seed 000's table, plus the free-text
// trap. Each prints what a real CLI prints in that situation.
func TestRouteFailureClasses(t *testing.T) {
	cases := []struct {
		name, script string
		extra        []string
		class        string
		binary       string
	}{
		{"timeout exit 124", `echo "still thinking"; exit 124`, nil, "timeout", ""},
		{"timeout exit 137", `kill -9 $$`, nil, "timeout", ""},
		{"timeout by deadline", `echo start; exec sleep 30`, []string{"--timeout", "300ms"}, "timeout", ""},
		{"binary missing 127", `echo "opencode: not found" >&2; exit 127`, nil, "agent_binary_missing", ""},
		{"binary missing 126", `exit 126`, nil, "agent_binary_missing", ""},
		{"policy denied", `echo 'AI_APICallError: {"error":"policy_denied","host":"hub.example","port":443,"binary":"/usr/bin/opencode","pid":7,"policy":"","reason":"no_matching_endpoint"}' >&2; exit 1`, nil, "sandbox_policy_denied", "present"},
		{"policy denied exit 0", `echo '{"error":"policy_denied","host":"hub.example","port":443,"reason":"no_matching_endpoint"}'; exit 0`, nil, "sandbox_policy_denied", "present"},
		{"auth invalid_api_key", `echo '{"error":{"message":"Incorrect API key provided: '"$MAC_INFERENCE_TOKEN"'","type":"invalid_request_error","code":"invalid_api_key"}}' >&2; exit 1`, nil, "authentication_failed", "present"},
		{"auth unauthorized", `echo '{"error":"unauthorized","detail":"token '"$MAC_INFERENCE_TOKEN"' revoked"}'; exit 1`, nil, "authentication_failed", "present"},
		{"auth status 401", `echo 'Error: {"name":"AI_APICallError","statusCode":401,"error":{"message":"nope"}}'; exit 1`, nil, "authentication_failed", "present"},
		{"auth status 403", `echo '{"error":{"message":"forbidden","status":403}}'; exit 1`, nil, "authentication_failed", "present"},
		{"rate limit code", `echo '{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}}'; exit 1`, nil, "rate_limited", ""},
		{"rate limit anthropic", `echo '{"type":"error","error":{"type":"rate_limit_error","message":"Number of requests has exceeded your rate limit"}}' >&2; exit 1`, nil, "rate_limited", ""},
		{"rate limit status 429", `echo '{"error":{"message":"too many","status":429}}'; exit 2`, nil, "rate_limited", ""},
		{"provider 502", `echo '{"error":{"message":"upstream unavailable","status":502}}'; exit 1`, nil, "provider_server_error", ""},
		{"provider 500 nested", `echo '{"data":{"error":{"status_code":"500","message":"boom"}}}'; exit 1`, nil, "provider_server_error", ""},
		{"sentinel missing", `echo "I refuse to echo anything"; exit 0`, nil, "sentinel_missing", ""},
		{"sentinel on stderr only", `echo "` + sentinel + `" >&2; exit 0`, nil, "sentinel_missing", ""},
		{"probe failed", `echo "segmentation fault" >&2; exit 3`, nil, "probe_failed", ""},
		{"sandbox not created", `echo "sandbox-supervisor: sandbox not created" >&2; exit 125`, nil, "probe_failed", ""},
		// The trap: a transcript that talks about rate limits and a
		// sandbox named mac-task-429907755059, in free text and in JSON
		// that is not an error object, is not rate limited.
		{"free-text trap", `echo "sandbox mac-task-429907755059: 429 Too Many Requests, rate_limit_exceeded, rate limited"; echo '{"sandbox":"mac-task-429907755059","message":"rate_limit_error 429 unauthorized 401 policy_denied"}'; echo "status: 429"; exit 1`, nil, "probe_failed", ""},
		{"free-text trap exit 0", `echo "mac-task-429907755059 rate limited"; exit 0`, nil, "sentinel_missing", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec, out, err := routeRecord(t, c.extra, fakeCLI(t, c.script))
			if rec.FailureClass != c.class || rec.Verified {
				t.Fatalf("failure_class %q verified %v, want %q: %s", rec.FailureClass, rec.Verified, c.class, out)
			}
			if rec.BinaryStatus != c.binary {
				t.Errorf("binary_status %q, want %q: %s", rec.BinaryStatus, c.binary, out)
			}
			if cli.Code(err) != 1 {
				t.Errorf("exit %d, want 1", cli.Code(err))
			}
			if rec.Schema != "mac.coding_agent.verification.v1" || rec.CLI != "opencode" {
				t.Errorf("record %s", out)
			}
		})
	}
	t.Run("command not found", func(t *testing.T) {
		rec, out, _ := routeRecord(t, nil, filepath.Join(t.TempDir(), "no-such-cli"))
		if rec.FailureClass != "agent_binary_missing" {
			t.Fatalf("%s", out)
		}
	})
	t.Run("inference token unavailable", func(t *testing.T) {
		out, _, err := runCLI(t, "route", "--cli", "opencode", "--token-unavailable")
		var rec routeproof.Record
		json.Unmarshal([]byte(out), &rec)
		if rec.FailureClass != "inference_token_unavailable" || cli.Code(err) != 1 || rec.Schema != routeproof.Schema {
			t.Fatalf("exit %d: %s", cli.Code(err), out)
		}
	})
	t.Run("verified", func(t *testing.T) {
		rec, out, err := routeRecord(t, nil, fakeCLI(t, `echo "working"; echo "`+sentinel+`"; exit 0`))
		if !rec.Verified || rec.FailureClass != "" || err != nil {
			t.Fatalf("exit %v: %s", err, out)
		}
	})
}

// MAC_CODING_AGENT_PREFLIGHT_TIMEOUT sets the default bound, in seconds.
func TestRouteTimeoutEnv(t *testing.T) {
	t.Setenv(TimeoutEnv, "0.3")
	rec, out, _ := routeRecord(t, nil, fakeCLI(t, `exec sleep 30`))
	if rec.FailureClass != "timeout" || rec.TimeoutSeconds != 0.3 || rec.DurationMS > 10000 {
		t.Fatalf("%s", out)
	}
	t.Setenv(TimeoutEnv, "soon")
	if _, _, err := runCLI(t, "route", "--cli", "x", "--sentinel", "s", "--", "true"); cli.Code(err) != 2 {
		t.Fatalf("bad %s: exit %d", TimeoutEnv, cli.Code(err))
	}
}
