package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// check --credentials says at load what the proxy would refuse: a
// binding to a provider the file lacks, and a bound endpoint admitted
// without inspection (its placeholders could not be resolved on CONNECT
// tunnels).
func TestCheckCredentials(t *testing.T) {
	testutil.RequireRoot(t) // the credentials file must be root's
	dir := t.TempDir()
	creds := filepath.Join(dir, "credentials.yaml")
	if err := os.WriteFile(creds, []byte(`version: 1
providers:
  openai:
    credentials:
      OPENAI_API_KEY: {value: sk-test-value}
    endpoints: [{host: api.openai.com, port: 443}]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	write := func(body string) string {
		p := filepath.Join(dir, "policy.yaml")
		os.WriteFile(p, []byte("version: 1\nnetwork_policies:\n  ai:\n    endpoints:\n"+body+"    binaries: [{path: /usr/bin/curl}]\n"), 0o600)
		return p
	}
	good := write("      - {host: api.openai.com, port: 443, protocol: rest, access: full}\n")
	if out, _, code := runCmd(t, "", "check", "--credentials", creds, good); code != 0 {
		t.Fatalf("good: %d\n%s", code, out)
	}
	passthrough := write("      - {host: api.openai.com, port: 443}\n")
	out, _, code := runCmd(t, "", "check", "--json", "--credentials", creds, passthrough)
	var res checkResult
	json.Unmarshal([]byte(out), &res)
	if code != 1 || res.Valid || len(res.Problems) != 1 || res.Problems[0].Path != "network_policies.ai.endpoints[0]" ||
		!strings.Contains(res.Problems[0].Msg, "placeholders cannot be resolved there") {
		t.Errorf("passthrough: %d %s", code, out)
	}
	// Without --credentials the same policy is valid: nothing is bound.
	if _, _, code := runCmd(t, "", "check", passthrough); code != 0 {
		t.Errorf("passthrough without --credentials: %d", code)
	}
	bound := write("      - {host: api.example.com, port: 443, protocol: rest, access: full, credential_binding: {provider: nope}}\n")
	out, _, code = runCmd(t, "", "check", "--credentials", creds, bound)
	if code != 1 || !strings.Contains(out, "network_policies.ai.endpoints[0].credential_binding.provider: the credentials file has no provider nope") {
		t.Errorf("unknown provider: %d %s", code, out)
	}
	os.Chmod(creds, 0o644)
	out, _, code = runCmd(t, "", "check", "--json", "--credentials", creds, good)
	res = checkResult{}
	json.Unmarshal([]byte(out), &res)
	if code != 1 || !strings.Contains(res.Error, creds+" is mode 0644") {
		t.Errorf("readable credentials file: %d %s", code, out)
	}
}
