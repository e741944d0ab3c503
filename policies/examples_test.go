package policies_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/binaries"
	"github.com/palisade-sandbox/palisade/pkg/credentials"
	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// Every example policy loads, and the package-manager examples grant
// exactly what their comments say: read-only inspected rules for the
// registry hosts, to the binaries that really connect. (pkg/sandboxnet's
// package-manager matrix runs them against the real registries.)
func TestExamplePolicies(t *testing.T) {
	files, err := filepath.Glob("examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example policies: %v", err)
	}
	loaded := map[string]*policy.Policy{}
	for _, f := range files {
		p, err := policy.LoadFile(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		loaded[filepath.Base(f)] = p
	}
	for file, want := range map[string]struct {
		hosts    []string
		port     int
		binaries []string
	}{
		"npm.yaml":        {[]string{"registry.npmjs.org"}, 443, []string{"/usr/bin/node", "/usr/local/bin/node"}},
		"go-modules.yaml": {[]string{"proxy.golang.org", "sum.golang.org"}, 443, []string{"/usr/local/go/bin/go", "/usr/lib/go-*/bin/go"}},
		"apt.yaml":        {[]string{"deb.debian.org", "security.debian.org"}, 80, []string{"/usr/lib/apt/methods/http"}},
	} {
		p := loaded[file]
		if p == nil {
			t.Errorf("examples/%s is missing or invalid", file)
			continue
		}
		if len(p.NetworkPolicies) != 1 {
			t.Errorf("%s: %d network entries, want 1", file, len(p.NetworkPolicies))
		}
		for name, np := range p.NetworkPolicies {
			var hosts, bins []string
			for _, ep := range np.Endpoints {
				hosts = append(hosts, ep.Host)
				if ep.Protocol != policy.ProtocolREST || ep.Access != policy.AccessReadOnly || len(ep.Rules) > 0 ||
					ep.Enforcement != policy.EnforcementEnforce || !slices.Equal(ep.Ports, []int{want.port}) {
					t.Errorf("%s: %s endpoint %s is not an enforced read-only rest rule on port %d: %+v", file, name, ep.Host, want.port, ep)
				}
				if ok, _ := ep.CheckReading("PUT", "/x", nil, ""); ok {
					t.Errorf("%s: %s allows a PUT to %s", file, name, ep.Host)
				}
			}
			for _, b := range np.Binaries {
				bins = append(bins, b.Path)
			}
			slices.Sort(hosts)
			slices.Sort(bins)
			slices.Sort(want.binaries)
			if !slices.Equal(hosts, want.hosts) || !slices.Equal(bins, want.binaries) {
				t.Errorf("%s: %s reaches %q with %q, want %q with %q", file, name, hosts, bins, want.hosts, want.binaries)
			}
		}
	}
}

// The model-provider and agent examples (docs/agents.md) give one binary,
// the file that really connects for that agent, inspected inference
// routes on its provider's API and nothing else: every other request to
// the host is refused.
func TestAgentExamplePolicies(t *testing.T) {
	for file, want := range map[string]struct {
		host    string
		binary  string
		allowed [][2]string // method, path
	}{
		"claude-code.yaml": {"api.anthropic.com", "/opt/agents/node_modules/@anthropic-ai/claude-code/bin/claude.exe",
			[][2]string{{"POST", "/v1/messages"}, {"POST", "/v1/messages/count_tokens"}, {"GET", "/api/claude_code/settings"}, {"GET", "/api/claude_code/policy_limits"}}},
		"codex.yaml": {"api.openai.com", "/opt/agents/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex",
			[][2]string{{"GET", "/v1/responses"}, {"POST", "/v1/responses"}, {"GET", "/v1/models"}}},
		"model-api.yaml": {"api.openai.com", "/opt/agents/bin/agent",
			[][2]string{{"POST", "/v1/chat/completions"}, {"POST", "/v1/responses"}, {"GET", "/v1/responses"}, {"POST", "/v1/embeddings"}, {"GET", "/v1/models"}}},
	} {
		p, err := policy.LoadFile(filepath.Join("examples", file))
		if err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		if len(p.NetworkPolicies) != 1 {
			t.Errorf("%s: %d network entries, want 1", file, len(p.NetworkPolicies))
		}
		if !slices.Contains(p.Filesystem.ReadOnly, "/opt/agents") || slices.Contains(p.Filesystem.ReadWrite, "/opt/agents") {
			t.Errorf("%s: /opt/agents is not read-only", file)
		}
		for name, np := range p.NetworkPolicies {
			if len(np.Binaries) != 1 || np.Binaries[0].Path != want.binary {
				t.Errorf("%s: %s binaries %v, want only %s", file, name, np.Binaries, want.binary)
			}
			if len(np.Endpoints) != 1 {
				t.Fatalf("%s: %s has %d endpoints, want 1", file, name, len(np.Endpoints))
			}
			ep := np.Endpoints[0]
			if ep.Host != want.host || !slices.Equal(ep.Ports, []int{443}) || ep.Protocol != policy.ProtocolREST || ep.Enforcement != policy.EnforcementEnforce {
				t.Errorf("%s: endpoint %+v, want an enforced rest rule for %s:443", file, ep, want.host)
			}
			for _, r := range want.allowed {
				if ok, why := ep.CheckReading(r[0], r[1], nil, ""); !ok {
					t.Errorf("%s: %s %s refused (%s)", file, r[0], r[1], why)
				}
			}
			for _, r := range [][2]string{{"POST", "/v1/files"}, {"DELETE", "/v1/responses/resp_1"}, {"POST", "/v1/fine_tuning/jobs"},
				{"GET", "/v1/organization/api_keys"}, {"PUT", "/v1/messages"}, {"POST", "/api/event_logging/v2/batch"}} {
				if ok, _ := ep.CheckReading(r[0], r[1], nil, ""); ok {
					t.Errorf("%s: %s %s allowed", file, r[0], r[1])
				}
			}
		}
	}
}

// policy-sync check, the binary, accepts every example policy, and none
// lists a binary that never connects (a script, or a symlink, whose real
// program connects instead): its only notes may be a missing path (an
// example for several kinds of host, or an agent not installed here) or
// a general interpreter (node for npm).
func TestExamplesPassPolicySyncCheck(t *testing.T) {
	bin := testutil.Binary(t, "policy-sync")
	files, err := filepath.Glob("examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example policies: %v", err)
	}
	for _, f := range files {
		var stderr bytes.Buffer
		cmd := exec.Command(bin, "check", "--json", f)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		var res struct {
			Valid    bool            `json:"valid"`
			Warnings []binaries.Note `json:"warnings"`
		}
		if err != nil || json.Unmarshal(out, &res) != nil || !res.Valid {
			t.Errorf("policy-sync check %s: %v\n%s%s", f, err, out, stderr.String())
			continue
		}
		for _, w := range res.Warnings {
			if w.Kind != binaries.Missing && w.Kind != binaries.Interpreter {
				t.Errorf("%s: %s", f, w)
			}
		}
	}
}

// The model-api example with credentials is model-api.yaml's policy
// (same routes, same binary) and agrees with its credentials file: the
// key is bound to api.openai.com:443 under /v1 only, which the policy
// inspects.
func TestModelAPICredentialsExample(t *testing.T) {
	p, err := policy.LoadFile("examples/model-api-credentials.yaml")
	if err != nil {
		t.Fatal(err)
	}
	plain, err := policy.LoadFile("examples/model-api.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if p.Checksum() != plain.Checksum() {
		t.Errorf("model-api-credentials.yaml is not model-api.yaml's policy")
	}
	b, err := os.ReadFile("examples/credentials/model-api.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f, err := credentials.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := credentials.CheckPolicy(p, f); err != nil {
		t.Fatalf("the example policy and its credentials disagree: %v", err)
	}
	s, err := credentials.Build(f, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host, path string
		ok         bool
	}{
		{"api.openai.com", "/v1/chat/completions", true},
		{"api.openai.com", "/v1", true},
		{"api.openai.com", "/dashboard", false},
		{"api.anthropic.com", "/v1/messages", false},
	} {
		path := tc.path
		r := s.Resolver(&credentials.Target{Host: tc.host, Port: 443, Paths: func() ([]string, bool) { return []string{path}, true }})
		h := http.Header{"Authorization": {"Bearer " + credentials.Placeholder("OPENAI_API_KEY")}}
		r.Header(h)
		if ok := r.Err() == nil; ok != tc.ok {
			t.Errorf("the key to %s%s: resolved %v, want %v", tc.host, tc.path, ok, tc.ok)
		}
	}
}
