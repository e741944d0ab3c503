package policy

import (
	"bytes"
	"os"
	"slices"
	"testing"

	"github.com/palisade-sandbox/palisade/policies"
)

func TestBundledDefaultIsFailClosedLockdown(t *testing.T) {
	onDisk, err := os.ReadFile("../../policies/default-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(onDisk, policies.DefaultPolicy) {
		t.Fatal("embedded default differs from policies/default-policy.yaml")
	}
	p, err := Parse(onDisk)
	if err != nil {
		t.Fatalf("bundled default is invalid: %v", err)
	}
	d := Default()
	if p.Checksum() != d.Checksum() {
		t.Errorf("Default() differs from the file: %s vs %s", d.Canonical(), p.Canonical())
	}
	if len(d.NetworkPolicies) != 0 {
		t.Errorf("default allows egress: %v", d.NetworkPolicies)
	}
	if d.Landlock.Compatibility != CompatibilityHardRequirement {
		t.Errorf("compatibility = %q", d.Landlock.Compatibility)
	}
	if d.Process.RunAsUser != SandboxIdentity || d.Process.RunAsGroup != SandboxIdentity {
		t.Errorf("process = %+v", d.Process)
	}
	if !d.Filesystem.IncludeWorkdir || !slices.Contains(d.Filesystem.ReadWrite, "/tmp") {
		t.Errorf("workdir and /tmp must be writable: %+v", d.Filesystem)
	}
	for _, must := range []string{"/usr", "/lib", "/etc", "/bin"} {
		if !slices.Contains(d.Filesystem.ReadOnly, must) {
			t.Errorf("read_only lacks %s", must)
		}
	}
	for _, forbidden := range []string{"/", "/root", "/home", "/proc", "/sys"} {
		if slices.Contains(d.Filesystem.ReadOnly, forbidden) || slices.Contains(d.Filesystem.ReadWrite, forbidden) {
			t.Errorf("default exposes %s", forbidden)
		}
	}
	// Callers get their own copy.
	d.Filesystem.ReadWrite = append(d.Filesystem.ReadWrite, "/etc")
	if slices.Contains(Default().Filesystem.ReadWrite, "/etc") {
		t.Error("mutating Default() leaked into the next call")
	}
}

func hermesValues() map[string]string {
	return map[string]string{
		"AGENT_USER":         "hermes",
		"MAC_HUB_HOST":       "hub.example.internal",
		"MAC_HUB_PORT":       "8080",
		"MODEL_GATEWAY_HOST": "models.example.com",
	}
}

func TestBundledTemplateRendersAndValidates(t *testing.T) {
	onDisk, err := os.ReadFile("../../policies/mac-hermes-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(onDisk, policies.MacHermesTemplate) {
		t.Fatal("embedded template differs from policies/mac-hermes-policy.yaml")
	}
	if got := Placeholders(onDisk); !slices.Equal(got, []string{"AGENT_USER", "MAC_HUB_HOST", "MAC_HUB_PORT", "MODEL_GATEWAY_HOST"}) {
		t.Fatalf("placeholders = %v", got)
	}
	out, err := Render(onDisk, hermesValues())
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	p, err := Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	if p.Landlock.Compatibility != CompatibilityHardRequirement {
		t.Errorf("compatibility = %q", p.Landlock.Compatibility)
	}
	for _, name := range []string{"mac_hub", "opencode_router", "model_gateway", "github", "python_packages", "node_packages"} {
		if p.NetworkPolicies[name] == nil {
			t.Errorf("template lacks entry %s", name)
		}
	}
	// opencode_router: exactly the two inference routes, on the hub host
	// and port, for opencode binaries only.
	r := p.NetworkPolicies["opencode_router"]
	if len(r.Endpoints) != 1 {
		t.Fatalf("opencode_router endpoints = %d", len(r.Endpoints))
	}
	e := r.Endpoints[0]
	if e.Host != "hub.example.internal" || !slices.Equal(e.Ports, []int{8080}) || e.Access != "" || e.Enforcement != EnforcementEnforce {
		t.Errorf("opencode_router endpoint = %+v", e)
	}
	var routes []string
	for _, rule := range e.Rules {
		routes = append(routes, rule.Allow.Method+" "+rule.Allow.Path)
	}
	if !slices.Equal(routes, []string{"POST /v1/chat/completions", "POST /v1/embeddings"}) {
		t.Errorf("opencode_router routes = %v", routes)
	}
	for _, b := range r.Binaries {
		if !bytes.HasSuffix([]byte(b.Path), []byte("/opencode")) {
			t.Errorf("opencode_router binary %s is not an opencode executable", b.Path)
		}
	}
	// Package registries are read-only.
	for _, name := range []string{"python_packages", "node_packages"} {
		for _, e := range p.NetworkPolicies[name].Endpoints {
			if e.Access != AccessReadOnly {
				t.Errorf("%s %s access = %q", name, e.Host, e.Access)
			}
		}
	}
	hosts := map[string]bool{}
	for _, np := range p.NetworkPolicies {
		for _, e := range np.Endpoints {
			hosts[e.Host] = true
		}
	}
	for _, h := range []string{"github.com", "api.github.com", "pypi.org", "files.pythonhosted.org", "registry.npmjs.org", "models.example.com"} {
		if !hosts[h] {
			t.Errorf("template does not reach %s", h)
		}
	}
	// A typical workdir does not contain any allowed binary.
	if err := p.CheckWorkdir("/home/hermes/work/repo"); err != nil {
		t.Errorf("CheckWorkdir: %v", err)
	}
}
