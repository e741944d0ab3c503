package egress

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/ceiling"
	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/policies"
)

// operatorBase renders the bundled operator template: a real base policy
// with a non-empty network_policies.
func operatorBase(t *testing.T) []byte {
	t.Helper()
	out, err := policy.Render(policies.MacHermesTemplate, map[string]string{
		"AGENT_USER": "hermes", "MAC_HUB_HOST": "hub.example.internal",
		"MAC_HUB_PORT": "8080", "MODEL_GATEWAY_HOST": "models.example.com",
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func writeRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const evilLock = `{
  "name": "app",
  "lockfileVersion": 3,
  "packages": {
    "": {"name": "app"},
    "node_modules/left-pad": {
      "version": "1.3.0",
      "resolved": "https://registry.npmjs.org/left-pad/-/left-pad-1.3.0.tgz"
    },
    "node_modules/backdoor": {
      "version": "6.6.6",
      "resolved": "https://evil.example/backdoor/-/backdoor-6.6.6.tgz"
    }
  }
}
`

func mustParse(t *testing.T, b []byte) *policy.Policy {
	t.Helper()
	p, err := policy.Parse(b)
	if err != nil {
		t.Fatalf("output is not a valid policy: %v\n%s", err, b)
	}
	return p
}

// hostsOf lists every endpoint host of every entry, with the entry key.
func hostsOf(p *policy.Policy) map[string][]string {
	out := map[string][]string{}
	for k, np := range p.NetworkPolicies {
		for _, e := range np.Endpoints {
			out[e.Host] = append(out[e.Host], k)
		}
	}
	return out
}

func findRefusal(d *Decision, host string) *Refusal {
	for i := range d.Refusals {
		if d.Refusals[i].Host == host {
			return &d.Refusals[i]
		}
	}
	return nil
}

func TestEvilLockfileRefusedTrustedGrantedReadOnly(t *testing.T) {
	base := operatorBase(t)
	repo := writeRepo(t, map[string]string{"package-lock.json": evilLock})
	out, d := Expand(Options{Base: base, BasePath: "base.yaml", Repo: repo})
	if d.Error != "" || !d.Expanded {
		t.Fatalf("decision: %+v", d)
	}
	p := mustParse(t, out)
	hosts := hostsOf(p)
	if _, ok := hosts["evil.example"]; ok {
		t.Fatalf("evil.example was granted: %v", hosts["evil.example"])
	}
	r := findRefusal(d, "evil.example")
	if r == nil || r.Reason != ReasonContractGap || r.Source != "package-lock.json:12" {
		t.Fatalf("evil.example refusal = %+v; refusals %+v", r, d.Refusals)
	}
	if len(d.Grants) != 1 || d.Grants[0] != (Grant{Host: "registry.npmjs.org", Tier: TierDerivedTrustedRegistry, Source: "package-lock.json:8", Entry: EntryTrustedNPM, ecosystem: ecosystemNPM}) {
		t.Fatalf("grants = %+v", d.Grants)
	}
	np := p.NetworkPolicies[EntryTrustedNPM]
	if np == nil || len(np.Endpoints) != 1 {
		t.Fatalf("entry %s = %+v", EntryTrustedNPM, np)
	}
	e := np.Endpoints[0]
	if e.Host != "registry.npmjs.org" || e.Access != policy.AccessReadOnly || e.Protocol != policy.ProtocolREST ||
		!slices.Equal(e.Ports, []int{443}) || e.Enforcement != policy.EnforcementEnforce || len(e.Rules) != 0 {
		t.Errorf("grant endpoint = %+v, want read-only rest 443", e)
	}
	for _, m := range []string{"GET", "HEAD"} {
		if !policy.AccessAllows(e.Access, m) {
			t.Errorf("grant does not allow %s", m)
		}
	}
	for _, m := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		if policy.AccessAllows(e.Access, m) {
			t.Errorf("grant allows %s", m)
		}
	}
	var bins []string
	for _, b := range np.Binaries {
		bins = append(bins, b.Path)
	}
	if !slices.Equal(bins, NPMBinaries) {
		t.Errorf("binaries = %v, want %v", bins, NPMBinaries)
	}
	if d.ResultPolicySHA256 != p.Checksum() || d.BasePolicySHA256 != mustParse(t, base).Checksum() || d.ResultPolicySHA256 == d.BasePolicySHA256 {
		t.Errorf("checksums: base %s result %s", d.BasePolicySHA256, d.ResultPolicySHA256)
	}
	if !slices.Equal(d.Files, []string{"package-lock.json"}) {
		t.Errorf("files = %v", d.Files)
	}
}

func TestBaseEntriesByteIdenticalAfterExpansion(t *testing.T) {
	baseText := operatorBase(t)
	repo := writeRepo(t, map[string]string{
		"package-lock.json":     evilLock,
		"backend/uv.lock":       uvLock,
		"web/.npmrc":            "registry=https://registry.yarnpkg.com/\n",
		"requirements-dev.txt":  "--extra-index-url https://pypi.org/simple\nflask==3.0\n",
		"docs/requirements.txt": "-i https://mirror.evil.example/simple\n",
	})
	meta := []byte(`{"id":"task_1","metadata":{"egress_contract":{"hosts":["artifacts.example.com"]}}}`)
	out, d := Expand(Options{Base: baseText, Repo: repo, TaskMetadata: meta})
	if !d.Expanded || d.Error != "" {
		t.Fatalf("decision %+v", d)
	}
	base := mustParse(t, baseText)
	got := mustParse(t, out)
	for key, np := range base.NetworkPolicies {
		want, _ := json.Marshal(np)
		have, _ := json.Marshal(got.NetworkPolicies[key])
		if !bytes.Equal(want, have) {
			t.Errorf("base entry %s changed:\n%s\n%s", key, want, have)
		}
	}
	for _, pair := range [][2]any{{base.Filesystem, got.Filesystem}, {base.Landlock, got.Landlock}, {base.Process, got.Process}, {base.Version, got.Version}} {
		a, _ := json.Marshal(pair[0])
		b, _ := json.Marshal(pair[1])
		if !bytes.Equal(a, b) {
			t.Errorf("static section changed: %s -> %s", a, b)
		}
	}
	added := 0
	for key, np := range got.NetworkPolicies {
		if base.NetworkPolicies[key] != nil {
			continue
		}
		added++
		if !strings.HasPrefix(key, "task_egress_") {
			t.Errorf("unexpected new entry %s", key)
		}
		for _, e := range np.Endpoints {
			if e.Access != policy.AccessReadOnly || !slices.Equal(e.Ports, []int{443}) || e.Protocol != policy.ProtocolREST {
				t.Errorf("%s: endpoint %+v is not read-only 443", key, e)
			}
		}
	}
	if added != 3 || len(got.NetworkPolicies) != len(base.NetworkPolicies)+3 {
		t.Errorf("added %d entries, want 3 (npm, python, hub-declared)", added)
	}
	h := hostsOf(got)
	for host, want := range map[string]string{
		"registry.npmjs.org": EntryTrustedNPM, "registry.yarnpkg.com": EntryTrustedNPM,
		"pypi.org": EntryTrustedPython, "files.pythonhosted.org": EntryTrustedPython,
		"artifacts.example.com": EntryHubDeclared,
	} {
		if !slices.Contains(h[host], want) {
			t.Errorf("%s not granted in %s: %v", host, want, h[host])
		}
	}
	for _, host := range []string{"evil.example", "mirror.evil.example"} {
		if len(h[host]) > 0 {
			t.Errorf("%s granted", host)
		}
		if r := findRefusal(d, host); r == nil || r.Reason != ReasonContractGap {
			t.Errorf("%s refusal = %+v", host, r)
		}
	}
	// The expanded output is itself a valid base: expanding it again with
	// nothing new changes nothing.
	out2, d2 := Expand(Options{Base: out, Repo: t.TempDir()})
	if d2.Expanded || !bytes.Equal(out2, out) {
		t.Errorf("re-expansion with an empty repo changed the policy: %+v", d2)
	}
}

const uvLock = `version = 1
requires-python = ">=3.11"

[[package]]
name = "flask"
version = "3.0.0"
source = { registry = "https://pypi.org/simple" }
sdist = { url = "https://files.pythonhosted.org/packages/flask-3.0.0.tar.gz", hash = "sha256:00", size = 1 }
wheels = [
    { url = "https://files.pythonhosted.org/packages/flask-3.0.0-py3-none-any.whl", hash = "sha256:00", size = 1 },
]

[[package]]
name = "internal"
version = "0.1.0"
source = { git = "https://git.corp.example/internal.git?rev=main#abc" }
`

func TestHubDeclaredGranted(t *testing.T) {
	repo := writeRepo(t, map[string]string{
		// Derived, untrusted, but declared by the hub: covered, not a gap.
		"requirements.txt": "--index-url https://pkgs.corp.example/simple\n",
	})
	meta := []byte(`{"metadata":{"egress_contract":{"hosts":["pkgs.corp.example","Artifacts.Corp.Example"]},"runtime":{"egress_contract":{"hosts":["sneaky.example.com"]}}}}`)
	out, d := Expand(Options{Base: operatorBase(t), Repo: repo, TaskMetadata: meta})
	if !d.Expanded {
		t.Fatalf("not expanded: %+v", d)
	}
	want := []Grant{
		{Host: "pkgs.corp.example", Tier: TierHubDeclared, Source: declaredField + "[0]", Entry: EntryHubDeclared, ecosystem: ecosystemAny},
		{Host: "artifacts.corp.example", Tier: TierHubDeclared, Source: declaredField + "[1]", Entry: EntryHubDeclared, ecosystem: ecosystemAny},
	}
	if !slices.Equal(d.Grants, want) {
		t.Errorf("grants = %+v", d.Grants)
	}
	if r := findRefusal(d, "pkgs.corp.example"); r != nil {
		t.Errorf("declared host also reported as refused: %+v", r)
	}
	if r := findRefusal(d, "sneaky.example.com"); r == nil || r.Reason != ReasonRuntimeMetadata {
		t.Errorf("runtime metadata host: %+v", r)
	}
	p := mustParse(t, out)
	if len(hostsOf(p)["sneaky.example.com"]) != 0 {
		t.Error("runtime metadata host granted")
	}
	np := p.NetworkPolicies[EntryHubDeclared]
	if np == nil || len(np.Binaries) != len(NPMBinaries)+len(PythonBinaries) {
		t.Errorf("hub-declared entry = %+v", np)
	}
}

func TestMalformedHostsRefused(t *testing.T) {
	meta := []byte(`{"metadata":{"egress_contract":{"hosts":[
		"*.example.com", "**.example.com", "10.0.0.1", "2001:db8::1", "[2001:db8::1]", "bad host.example.com",
		"a.example.com:8443", "https://x.example.com/", "localhost", "", 42, "a..example.com",
		"example.com.", "-a.example.com", "user@a.example.com", "a.example.com/path", "1.2.3.4:443"]}}}`)
	base := operatorBase(t)
	out, d := Expand(Options{Base: base, Repo: t.TempDir(), TaskMetadata: meta})
	if d.Expanded || len(d.Grants) != 0 || d.Error != "" {
		t.Fatalf("malformed hosts expanded the policy: %+v", d)
	}
	if !bytes.Equal(out, base) {
		t.Error("output differs from base")
	}
	if len(d.Refusals) != 17 {
		t.Errorf("%d refusals, want 17: %+v", len(d.Refusals), d.Refusals)
	}
	byReason := map[Reason]int{}
	for _, r := range d.Refusals {
		byReason[r.Reason]++
		if !strings.HasPrefix(r.Source, declaredField+"[") {
			t.Errorf("refusal source %q", r.Source)
		}
	}
	want := map[Reason]int{ReasonWildcard: 2, ReasonIPLiteral: 4, ReasonPort: 1, ReasonMalformedHost: 10}
	for reason, n := range want {
		if byReason[reason] != n {
			t.Errorf("%s: %d refusals, want %d (all: %v)", reason, byReason[reason], n, byReason)
		}
	}
}

func TestDefaultPolicyNeverExpanded(t *testing.T) {
	repo := writeRepo(t, map[string]string{"package-lock.json": evilLock})
	meta := []byte(`{"metadata":{"egress_contract":{"hosts":["pypi.org"]}}}`)
	for _, base := range [][]byte{policies.DefaultPolicy, []byte("version: 1\nnetwork_policies: {}\n"), []byte("version: 1\n")} {
		out, d := Expand(Options{Base: base, Repo: repo, TaskMetadata: meta})
		if !bytes.Equal(out, base) || d.Expanded || len(d.Grants) != 0 {
			t.Errorf("empty network_policies expanded: %+v", d)
		}
		if !strings.Contains(d.Error, "never expanded") || d.BasePolicySHA256 == "" || d.ResultPolicySHA256 != d.BasePolicySHA256 {
			t.Errorf("decision = %+v", d)
		}
	}
}

func TestAnyErrorKeepsBase(t *testing.T) {
	base := operatorBase(t)
	repo := writeRepo(t, map[string]string{"package-lock.json": evilLock})
	cases := map[string]Options{
		"missing repo":         {Base: base, Repo: filepath.Join(t.TempDir(), "nope")},
		"repo is a file":       {Base: base, Repo: filepath.Join(repo, "package-lock.json")},
		"metadata not json":    {Base: base, Repo: repo, TaskMetadata: []byte("hosts: [a.example.com]")},
		"metadata hosts type":  {Base: base, Repo: repo, TaskMetadata: []byte(`{"metadata":{"egress_contract":{"hosts":"pypi.org"}}}`)},
		"metadata trailing":    {Base: base, Repo: repo, TaskMetadata: []byte(`{} {}`)},
		"trusted list invalid": {Base: base, Repo: repo, Trusted: []string{"*.npmjs.org"}},
		"trusted upper-case":   {Base: base, Repo: repo, Trusted: []string{"Registry.npmjs.org"}},
		"invalid base":         {Base: []byte("version: 1\nprocess: {run_as_user: root}\n"), Repo: repo},
	}
	for name, opts := range cases {
		out, d := Expand(opts)
		if !bytes.Equal(out, opts.Base) || d.Expanded || d.Error == "" || len(d.Grants) != 0 {
			t.Errorf("%s: expanded=%v error=%q grants=%v", name, d.Expanded, d.Error, d.Grants)
		}
	}
}

func TestNothingGrantedIsNotAnError(t *testing.T) {
	base := operatorBase(t)
	repo := writeRepo(t, map[string]string{"yarn.lock": `"x@^1":
  version "1.0.0"
  resolved "https://evil.example/x/-/x-1.0.0.tgz#abc"
`})
	out, d := Expand(Options{Base: base, Repo: repo})
	if !bytes.Equal(out, base) || d.Expanded || d.Error != "" {
		t.Fatalf("decision %+v", d)
	}
	if r := findRefusal(d, "evil.example"); r == nil || r.Source != "yarn.lock:3" {
		t.Errorf("refusal = %+v", r)
	}
}

func TestTrustedRegistriesFileReplacesBuiltin(t *testing.T) {
	list, err := ParseTrustedRegistries([]byte("# reviewed 2026-11-01\nnpm.corp.example\n\nNPM.corp.example\n"))
	if err != nil || !slices.Equal(list, []string{"npm.corp.example"}) {
		t.Fatalf("list %v err %v", list, err)
	}
	repo := writeRepo(t, map[string]string{
		"package-lock.json": evilLock,
		".npmrc":            "@corp:registry=https://npm.corp.example/\n//npm.corp.example/:_authToken=SECRET-TOKEN-VALUE\n",
	})
	_, d := Expand(Options{Base: operatorBase(t), Repo: repo, Trusted: list, TrustedSource: "trusted.txt"})
	if len(d.Grants) != 1 || d.Grants[0].Host != "npm.corp.example" || d.Grants[0].Source != ".npmrc:1" {
		t.Fatalf("grants = %+v", d.Grants)
	}
	// registry.npmjs.org is built-in trusted, but the file replaced the list.
	if r := findRefusal(d, "registry.npmjs.org"); r == nil || r.Reason != ReasonContractGap {
		t.Errorf("registry.npmjs.org refusal = %+v", r)
	}
	if d.TrustedRegistries != "trusted.txt" {
		t.Errorf("trusted_registries = %q", d.TrustedRegistries)
	}
	if bytes.Contains(d.JSON(), []byte("SECRET-TOKEN-VALUE")) {
		t.Error("a credential from .npmrc reached the decision event")
	}
	// An empty list trusts nothing.
	_, d = Expand(Options{Base: operatorBase(t), Repo: repo, Trusted: []string{}})
	if len(d.Grants) != 0 || d.Expanded {
		t.Errorf("empty trusted list granted %+v", d.Grants)
	}
	for _, bad := range []string{"*.corp.example", "10.1.2.3", "npm.corp.example:443", "https://npm.corp.example", "npm corp", "localhost"} {
		if _, err := ParseTrustedRegistries([]byte(bad + "\n")); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("%q: err %v", bad, err)
		}
	}
}

func TestBinariesUnderWritablePathsLeftOut(t *testing.T) {
	base := []byte(`version: 1
filesystem_policy:
  read_only: [/usr/bin, /opt]
  read_write: [/usr/local, /tmp]
network_policies:
  tool:
    endpoints: [{host: api.example.com, port: 443}]
    binaries: [{path: /opt/tool}]
`)
	repo := writeRepo(t, map[string]string{"package-lock.json": evilLock})
	out, d := Expand(Options{Base: base, Repo: repo})
	if !d.Expanded {
		t.Fatalf("not expanded: %+v", d)
	}
	np := mustParse(t, out).NetworkPolicies[EntryTrustedNPM]
	if len(np.Binaries) != 1 || np.Binaries[0].Path != "/usr/bin/node" {
		t.Errorf("binaries = %+v, want only /usr/bin/node (/usr/local is writable)", np.Binaries)
	}

	// Every node binary under a writable path: nothing to grant to.
	base2 := bytes.Replace(base, []byte("read_write: [/usr/local, /tmp]"), []byte("read_write: [/usr/local, /usr/bin/node, /tmp]"), 1)
	base2 = bytes.Replace(base2, []byte("read_only: [/usr/bin, /opt]"), []byte("read_only: [/opt]"), 1)
	out, d = Expand(Options{Base: base2, Repo: repo})
	if d.Expanded || !bytes.Equal(out, base2) || d.Error != "" {
		t.Fatalf("decision %+v", d)
	}
	if r := findRefusal(d, "registry.npmjs.org"); r == nil || r.Reason != ReasonNoBinary {
		t.Errorf("refusal = %+v", r)
	}
}

func TestEntryKeyCollisionAppendsSuffix(t *testing.T) {
	base := []byte(`version: 1
network_policies:
  task_egress_trusted_npm:
    endpoints: [{host: api.example.com, port: 443}]
    binaries: [{path: /usr/bin/curl}]
`)
	repo := writeRepo(t, map[string]string{"package-lock.json": evilLock})
	out, d := Expand(Options{Base: base, Repo: repo})
	p := mustParse(t, out)
	if !d.Expanded || d.Grants[0].Entry != EntryTrustedNPM+"_2" || p.NetworkPolicies[EntryTrustedNPM+"_2"] == nil {
		t.Fatalf("grants %+v", d.Grants)
	}
	if h := p.NetworkPolicies[EntryTrustedNPM].Endpoints; len(h) != 1 || h[0].Host != "api.example.com" {
		t.Errorf("existing entry rewritten: %+v", h)
	}
}

func TestVerifyRejectsWideningResults(t *testing.T) {
	base := mustParse(t, operatorBase(t))
	for name, mutate := range map[string]func(p *policy.Policy){
		"filesystem": func(p *policy.Policy) { p.Filesystem.ReadWrite = append(p.Filesystem.ReadWrite, "/home") },
		"landlock":   func(p *policy.Policy) { p.Landlock.Compatibility = policy.CompatibilityBestEffort },
		"process":    func(p *policy.Policy) { p.Process.RunAsUser = "1000" },
		"base entry": func(p *policy.Policy) { p.NetworkPolicies["github"].Endpoints[0].Access = policy.AccessFull },
		"removed":    func(p *policy.Policy) { delete(p.NetworkPolicies, "github") },
		"read-write grant": func(p *policy.Policy) {
			p.NetworkPolicies["task_egress_x"] = &policy.NetworkPolicy{Name: "x", Endpoints: []*policy.Endpoint{{Host: "a.example.com", Ports: []int{443}, Protocol: "rest", Access: "read-write"}}, Binaries: []policy.Binary{{Path: "/usr/bin/node"}}}
		},
		"wildcard grant": func(p *policy.Policy) {
			p.NetworkPolicies["task_egress_x"] = &policy.NetworkPolicy{Name: "x", Endpoints: []*policy.Endpoint{{Host: "*.example.com", Ports: []int{443}, Protocol: "rest", Access: "read-only"}}, Binaries: []policy.Binary{{Path: "/usr/bin/node"}}}
		},
		"port 80 grant": func(p *policy.Policy) {
			p.NetworkPolicies["task_egress_x"] = &policy.NetworkPolicy{Name: "x", Endpoints: []*policy.Endpoint{{Host: "a.example.com", Ports: []int{80}, Protocol: "rest", Access: "read-only"}}, Binaries: []policy.Binary{{Path: "/usr/bin/node"}}}
		},
	} {
		p := base.Clone()
		mutate(p)
		if _, err := Verify(base, p.YAML()); err == nil {
			t.Errorf("%s: Verify accepted a widened policy", name)
		}
	}
	if _, err := Verify(base, base.YAML()); err != nil {
		t.Errorf("identity: %v", err)
	}
}

func TestDecisionEvent(t *testing.T) {
	repo := writeRepo(t, map[string]string{"package-lock.json": evilLock})
	fixed := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	_, d := Expand(Options{Base: operatorBase(t), BasePath: "/etc/mac/openshell-policy.yaml", Repo: repo, Now: func() time.Time { return fixed }})
	line := d.JSON()
	if bytes.Count(line, []byte("\n")) != 1 || !bytes.HasSuffix(line, []byte("\n")) {
		t.Fatalf("not one line: %q", line)
	}
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"schema": Schema, "event": EventName, "time": "2026-11-30T12:00:00Z", "expanded": true, "trusted_registries": "builtin", "base_policy": "/etc/mac/openshell-policy.yaml"} {
		if m[k] != want {
			t.Errorf("%s = %v, want %v", k, m[k], want)
		}
	}
	g := m["grants"].([]any)[0].(map[string]any)
	if g["host"] != "registry.npmjs.org" || g["tier"] != "derived_trusted_registry" || g["source"] != "package-lock.json:8" {
		t.Errorf("grant = %v", g)
	}
	r := m["refusals"].([]any)[0].(map[string]any)
	if r["host"] != "evil.example" || r["reason"] != "contract_gap" || r["source"] != "package-lock.json:12" {
		t.Errorf("refusal = %v", r)
	}
	if _, ok := m["error"]; ok {
		t.Error("error present on success")
	}
}

func TestEnabled(t *testing.T) {
	for v, want := range map[string]bool{"": false, "0": false, "1": true, "true": true, "yes": true, "no": false, "off": false} {
		if got := Enabled(func(string) string { return v }); got != want {
			t.Errorf("%s=%q: %v", EnvTaskEgress, v, got)
		}
	}
}

func TestRefusalsBounded(t *testing.T) {
	var b strings.Builder
	for i := range 300 {
		fmt.Fprintf(&b, "--extra-index-url https://h%03d.evil.example/simple\n", i)
	}
	repo := writeRepo(t, map[string]string{"requirements.txt": b.String()})
	_, d := Expand(Options{Base: operatorBase(t), Repo: repo})
	if len(d.Refusals) != MaxReported || d.RefusalsOmitted != 300-MaxReported {
		t.Errorf("%d refusals, %d omitted", len(d.Refusals), d.RefusalsOmitted)
	}
	if len(d.JSON()) > 128<<10 {
		t.Errorf("decision is %d bytes", len(d.JSON()))
	}
}

func TestGrantsBoundedPerTier(t *testing.T) {
	hosts := make([]string, 300)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("h%03d.corp.example", i)
	}
	meta, _ := json.Marshal(map[string]any{"metadata": map[string]any{"egress_contract": map[string]any{"hosts": hosts}}})
	out, d := Expand(Options{Base: operatorBase(t), Repo: t.TempDir(), TaskMetadata: meta})
	if !d.Expanded || len(d.Grants) != MaxGrants {
		t.Fatalf("%d grants", len(d.Grants))
	}
	limited := 0
	for _, r := range d.Refusals {
		if r.Reason == ReasonLimit {
			limited++
		}
	}
	if limited != 300-MaxGrants {
		t.Errorf("%d limit refusals", limited)
	}
	if n := len(mustParse(t, out).NetworkPolicies[EntryHubDeclared].Endpoints); n != MaxGrants {
		t.Errorf("%d endpoints", n)
	}
}

// With a ceiling, an expansion the ceiling refuses is dropped (the base
// is the output, the decision says why), and a base it refuses is an
// error; an expansion within it goes through.
func TestCeilingRefusesExpansion(t *testing.T) {
	repo := writeRepo(t, map[string]string{"package-lock.json": evilLock})
	bp := mustParse(t, operatorBase(t))
	delete(bp.NetworkPolicies, "node_packages") // so the npm grant is new
	base := bp.YAML()
	against := func(c *policy.Policy) func(*policy.Policy) error {
		return func(p *policy.Policy) error {
			if xs := ceiling.Contains(c, p, ceiling.Options{}); len(xs) > 0 {
				return &ceiling.Error{Ceiling: "test-ceiling", Excesses: xs}
			}
			return nil
		}
	}
	out, d := Expand(Options{Base: base, Repo: repo, Ceiling: against(mustParse(t, base))})
	if d.Expanded || !bytes.Equal(out, base) || !strings.Contains(d.Error, "expanded policy refused (base kept): policy exceeds the ceiling test-ceiling: network_policies.task_egress_trusted_npm.endpoints[0]: host registry.npmjs.org") {
		t.Fatalf("expanded beyond the ceiling: %v %q", d.Expanded, d.Error)
	}
	wide, d := Expand(Options{Base: base, Repo: repo})
	if !d.Expanded {
		t.Fatalf("not expanded without a ceiling: %+v", d)
	}
	if _, d := Expand(Options{Base: base, Repo: repo, Ceiling: against(mustParse(t, wide))}); !d.Expanded || d.Error != "" {
		t.Fatalf("an expansion within the ceiling was refused: %q", d.Error)
	}
	narrow := mustParse(t, base)
	narrow.NetworkPolicies = map[string]*policy.NetworkPolicy{}
	if _, d := Expand(Options{Base: base, Repo: repo, Ceiling: against(narrow)}); d.Expanded || !strings.HasPrefix(d.Error, "base policy: policy exceeds the ceiling") {
		t.Fatalf("a base beyond the ceiling: %q", d.Error)
	}
}
