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
	"github.com/palisade-sandbox/palisade/pkg/sandbox"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// --credentials: the sandbox's environment gets a placeholder per key
// (spec shows what run would use), and every problem stops the run
// before anything exists, naming the file or field: a file others can
// read, an unset env source, a policy that binds what the file lacks or
// lets a bound endpoint pass uninspected, a key set with --env or passed
// through, a value in the environment under another name.
func TestRunCredentials(t *testing.T) {
	testutil.RequireRoot(t) // the credentials file must be root's
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.yaml")
	os.WriteFile(pol, []byte(egressBase), 0o600)
	wd := filepath.Join(dir, "work")
	os.Mkdir(wd, 0o755)
	creds := filepath.Join(dir, "credentials.yaml")
	writeCreds := func(mode os.FileMode, text string) {
		os.Remove(creds)
		if err := os.WriteFile(creds, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
	}
	const good = `version: 1
providers:
  gh:
    credentials:
      GH_TOKEN: {value: "ghp-secret-value-1"}
      GH_OTHER: {env: PALISADE_TEST_OPS_TOKEN}
    endpoints: [{host: github.com, port: 443}]
`
	t.Setenv("PALISADE_TEST_OPS_TOKEN", "ops-secret-value-2")
	spec := func(extra ...string) (map[string]string, error) {
		args := append([]string{"spec", "--policy", pol, "--workdir", wd, "--state-dir", filepath.Join(dir, "state"), "--credentials", creds}, extra...)
		var out, errb bytes.Buffer
		err := run(context.Background(), append(args, "--", "/bin/true"), strings.NewReader(""), &out, &errb)
		if err != nil {
			return nil, err
		}
		var s struct{ Process struct{ Env []string } }
		json.Unmarshal(out.Bytes(), &s)
		env := map[string]string{}
		for _, kv := range s.Process.Env {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		if strings.Contains(out.String()+errb.String(), "secret-value") {
			t.Errorf("spec output holds a value:\n%s\n%s", out.String(), errb.String())
		}
		return env, nil
	}
	writeCreds(0o600, good)
	env, err := spec()
	if err != nil {
		t.Fatal(err)
	}
	if env["GH_TOKEN"] != "openshell:resolve:env:GH_TOKEN" || env["GH_OTHER"] != "openshell:resolve:env:GH_OTHER" {
		t.Errorf("placeholders: %v", env)
	}
	for _, tc := range []struct {
		name  string
		mode  os.FileMode
		text  string
		extra []string
		code  int
		want  string
	}{
		{"readable file", 0o644, good, nil, sandbox.ExitSandboxFailed, creds + " is mode 0644"},
		{"unset env source", 0o600, strings.Replace(good, "PALISADE_TEST_OPS_TOKEN", "PALISADE_TEST_UNSET_VAR", 1), nil, sandbox.ExitSandboxFailed, "environment variable PALISADE_TEST_UNSET_VAR is not set"},
		{"bound to a host the policy does not admit", 0o600, strings.Replace(good, "github.com", "api.github.com", 1), nil, 0, ""},
		{"bound to a port the policy does not admit", 0o600, strings.Replace(good, "github.com, port: 443", "github.com, port: 22", 1), nil, 0, ""},
		{"--env key", 0o600, good, []string{"--env", "GH_TOKEN=x"}, cli.ExitUsage, "--env GH_TOKEN: holds or names a credential"},
		{"passthrough source", 0o600, good, []string{"--env-passthrough", "PALISADE_TEST_OPS_TOKEN"}, cli.ExitUsage, "--env-passthrough: PALISADE_TEST_OPS_TOKEN holds or names a credential"},
		{"value under another name", 0o600, good, []string{"--env", "INNOCENT=ghp-secret-value-1"}, sandbox.ExitSandboxFailed, "the sandbox's variable INNOCENT would hold the value of credential GH_TOKEN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writeCreds(tc.mode, tc.text)
			_, err := spec(tc.extra...)
			if tc.want == "" {
				if err != nil {
					t.Errorf("refused: %v", err)
				}
				return
			}
			if cli.Code(err) != tc.code || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("exit %d (%v), want %d with %q", cli.Code(err), err, tc.code, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "secret-value") {
				t.Errorf("error holds a value: %v", err)
			}
		})
	}
	// The policy binds an endpoint through a provider the file lacks.
	writeCreds(0o600, good)
	os.WriteFile(pol, []byte(strings.Replace(egressBase, "access: read-only", "access: read-only\n        credential_binding: {provider: nosuch}", 1)), 0o600)
	if _, err := spec(); cli.Code(err) != sandbox.ExitSandboxFailed || !strings.Contains(err.Error(), "the credentials file has no provider nosuch") {
		t.Errorf("unknown provider: %v", err)
	}
	// A policy that admits the bound endpoint without inspection.
	os.WriteFile(pol, []byte(strings.Replace(egressBase, "        protocol: rest\n        access: read-only\n", "", 1)), 0o600)
	if _, err := spec(); cli.Code(err) != sandbox.ExitSandboxFailed || !strings.Contains(err.Error(), "network_policies.github.endpoints[0]: admits github.com:443") {
		t.Errorf("uninspected: %v", err)
	}
}
