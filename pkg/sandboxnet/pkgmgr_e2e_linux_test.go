//go:build linux

package sandboxnet

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/ocsf/ocsftest"
	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// The package-manager matrix (issue #31): real package managers in real
// sandboxes, each through the read-only inspected rule of its example in
// policies/examples/, against the real registries. These are the only
// tests that leave the machine: the issue names the registries (the npm
// registry, proxy.golang.org, deb.debian.org), which every development
// machine and CI reach. A test whose registry is unreachable says so,
// and fails under PALISADE_REQUIRE_PRIVILEGED=1. Caches live in each
// test's own working directory: nothing is shared between sandboxes or
// with the host.

// registryLab runs one example policy in sandboxes.
type registryLab struct {
	t                              *testing.T
	sup, policy, wd, events, state string
}

// newRegistryLab loads policies/examples/<file>; extraBinaries join its
// one network entry (a test client for the write the rule refuses, or
// the go command at a path the example does not list).
func newRegistryLab(t *testing.T, file string, extraBinaries ...string) *registryLab {
	t.Helper()
	testutil.RequireRoot(t)
	for _, f := range []string{"landlock", "seccomp", "nftables", "ns:net"} {
		testutil.RequireFeature(t, f)
	}
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	l := &registryLab{t: t, sup: testutil.Binary(t, "sandbox-supervisor")}
	testutil.Binary(t, "egress-proxy")
	p, err := policy.LoadFile(filepath.Join(root, "policies", "examples", file))
	if err != nil {
		t.Fatalf("example policy: %v", err)
	}
	if len(p.NetworkPolicies) != 1 {
		t.Fatalf("%s: %d network entries, want 1", file, len(p.NetworkPolicies))
	}
	for _, np := range p.NetworkPolicies {
		for _, b := range extraBinaries {
			np.Binaries = append(np.Binaries, policy.Binary{Path: b})
		}
	}
	dir := t.TempDir()
	l.policy = filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(l.policy, p.YAML(), 0o600); err != nil {
		t.Fatal(err)
	}
	l.wd = filepath.Join(dir, "work")
	os.Mkdir(l.wd, 0o755)
	os.Chown(l.wd, 10001, 10001)
	l.events = filepath.Join(dir, "events.jsonl")
	l.state = filepath.Join(dir, "state")
	return l
}

// run runs script in a sandbox (working directory l.wd) and returns its
// "name=value" results.
func (l *registryLab) run(script string, env ...string) map[string]string {
	l.t.Helper()
	args := []string{"run", "--policy", l.policy, "--events", l.events, "--state-dir", l.state, "--workdir", l.wd}
	for _, e := range env {
		args = append(args, "--env", e)
	}
	cmd := exec.Command(l.sup, append(args, "--", "/bin/sh", "-c", script)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	l.t.Logf("sandbox output:\n%s", out)
	if err != nil {
		l.t.Logf("sandbox stderr:\n%s", stderr.String())
		l.t.Fatalf("sandbox run: %v", err)
	}
	return results(out)
}

// httpEvent is what the tests read of one HTTP Activity (4002) or
// Network Activity (4001) event (a refusal of a host, port or binary,
// which names the host without method or path).
type httpEvent struct {
	class                              int
	status, method, host, path, reason string
}

func (l *registryLab) httpEvents() []httpEvent {
	l.t.Helper()
	data, err := os.ReadFile(l.events)
	if err != nil {
		l.t.Fatal(err)
	}
	ocsftest.ValidateLines(l.t, data)
	var out []httpEvent
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var e struct {
			Class  int    `json:"class_uid"`
			Status string `json:"status_code"`
			Dst    struct {
				Host string `json:"hostname"`
			} `json:"dst_endpoint"`
			HTTP struct {
				Method string `json:"http_method"`
				URL    struct {
					Host string `json:"hostname"`
					Path string `json:"path"`
				} `json:"url"`
			} `json:"http_request"`
			Unmapped struct {
				Proxy struct {
					Reason string `json:"reason"`
				} `json:"egress_proxy"`
			} `json:"unmapped"`
		}
		if json.Unmarshal(line, &e) != nil {
			continue
		}
		switch e.Class {
		case 4002:
			out = append(out, httpEvent{e.Class, e.Status, e.HTTP.Method, e.HTTP.URL.Host, e.HTTP.URL.Path, e.Unmapped.Proxy.Reason})
		case 4001:
			out = append(out, httpEvent{e.Class, e.Status, "", e.Dst.Host, "", e.Unmapped.Proxy.Reason})
		}
	}
	return out
}

// expectEvents checks that an event matching each want was written
// (empty fields match anything) and that no request was refused as
// ambiguous.
func (l *registryLab) expectEvents(want ...httpEvent) {
	l.t.Helper()
	evs := l.httpEvents()
	for _, e := range evs {
		if e.reason == policy.L7AmbiguousPath {
			l.t.Errorf("refused as ambiguous: %+v", e)
		}
	}
	for _, w := range want {
		found := false
		for _, e := range evs {
			if (w.class == 0 || e.class == w.class) && (w.status == "" || e.status == w.status) && (w.method == "" || e.method == w.method) &&
				(w.host == "" || e.host == w.host) && (w.path == "" || e.path == w.path) && (w.reason == "" || e.reason == w.reason) {
				found = true
				break
			}
		}
		if !found {
			l.t.Errorf("no event %+v among %d HTTP events: %+v", w, len(evs), evs)
		}
	}
}

func requirePaths(t *testing.T, what string, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			testutil.RequireData(t, what, err)
		}
	}
}

const npmScript = `
W=$PWD
PKG='n => JSON.parse(require("fs").readFileSync("node_modules/" + n + "/package.json"))'
NAMES="process.argv.slice(1).map($PKG).map(p => p.name).join(' ')"
VERSIONS="process.argv.slice(1).map($PKG).map(p => p.version).join(' ')"
export HOME=$W/home npm_config_cache=$W/cache npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false
mkdir -p $HOME app ci pub
cd $W/app && npm install left-pad @types/node @modelcontextprotocol/sdk >$W/install.log 2>&1; printf 'install=%s\n' $?
printf 'installed=%s\n' "$(cd $W/app && node -p "$NAMES" left-pad @types/node @modelcontextprotocol/sdk 2>&1)"
printf 'install_log=%s\n' "$(tail -5 $W/install.log | tr '\n' ' ')"
cd $W/app && npm install --ignore-scripts --omit=optional @openai/codex >$W/codex.log 2>&1; printf 'codex=%s %s\n' $? "$(cd $W/app && node -p "$NAMES" @openai/codex 2>&1)"
printf 'codex_log=%s\n' "$(tail -5 $W/codex.log | tr '\n' ' ')"
cp $W/fixture/package.json $W/fixture/package-lock.json $W/ci/
cd $W/ci && npm ci --cache $W/cache-ci >$W/ci.log 2>&1; printf 'ci=%s %s\n' $? "$(cd $W/ci && node -p "$VERSIONS" @types/node @types/yargs-parser undici-types 2>&1)"
printf 'ci_log=%s\n' "$(tail -5 $W/ci.log | tr '\n' ' ')"
cd $W/pub && printf '{"name":"@palisade-test/never-published","version":"0.0.1"}\n' >package.json
npm publish --access public --//registry.npmjs.org/:_authToken=palisade-test-not-a-token >$W/publish.log 2>&1; printf 'publish=%s\n' $?
printf 'publish_log=%s\n' "$(grep -v notice $W/publish.log | tr '\n' ' ')"
`

// npm under the npm example: unscoped and scoped installs, the Codex CLI
// (--ignore-scripts; its platform binary is an optional dependency of a
// few hundred MB, left out), npm ci from a lockfile with scoped
// dependencies; npm publish refused.
func TestNpmThroughReadOnlyRule(t *testing.T) {
	testutil.RequireReachable(t, "the npm registry", "registry.npmjs.org:443")
	requirePaths(t, "node and npm (Debian packages nodejs and npm)", "/usr/bin/node")
	testutil.RequireCommand(t, "npm")
	l := newRegistryLab(t, "npm.yaml")
	fixture := filepath.Join(l.wd, "fixture")
	os.Mkdir(fixture, 0o755)
	for _, f := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", "npm-ci", f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(fixture, f), b, 0o644)
	}
	r := l.run(npmScript)
	if r["install"] != "0" || r["installed"] != "left-pad @types/node @modelcontextprotocol/sdk" {
		t.Errorf("npm install: exit %q, installed %q; log %q", r["install"], r["installed"], r["install_log"])
	}
	if r["codex"] != "0 @openai/codex" {
		t.Errorf("npm install @openai/codex: %q; log %q", r["codex"], r["codex_log"])
	}
	if r["ci"] != "0 20.11.0 21.0.3 5.26.5" {
		t.Errorf("npm ci: %q; log %q", r["ci"], r["ci_log"])
	}
	if pl := r["publish_log"]; r["publish"] == "0" || !strings.Contains(pl, "E403") || !strings.Contains(pl, "PUT https://registry.npmjs.org/@palisade-test%2fnever-published") || !strings.Contains(pl, "policy_denied") {
		t.Errorf("npm publish: exit %q, log %q; want a 403 policy_denied", r["publish"], r["publish_log"])
	}
	l.expectEvents(
		httpEvent{class: 4002, status: "allowed", method: "GET", host: "registry.npmjs.org", path: "/@types%2fnode"},
		httpEvent{class: 4002, status: "allowed", method: "GET", host: "registry.npmjs.org", path: "/@modelcontextprotocol%2fsdk"},
		httpEvent{class: 4002, status: "allowed", method: "GET", host: "registry.npmjs.org", path: "/@types/yargs-parser/-/yargs-parser-21.0.3.tgz"},
		httpEvent{class: 4002, status: "policy_denied", method: "PUT", host: "registry.npmjs.org", path: "/@palisade-test%2fnever-published", reason: policy.L7AccessDenied},
	)
}

const goScript = `
W=$PWD
export HOME=$W/home GOPATH=$W/gopath GOMODCACHE=$W/gomod GOCACHE=$W/gocache GOFLAGS=-modcacherw GOTOOLCHAIN=local
mkdir -p $HOME m && cd m && @GO@ mod init example.com/m >/dev/null 2>&1
@GO@ mod download -json github.com/BurntSushi/toml@v1.3.2 >$W/dl.json 2>$W/dl.err; printf 'download=%s\n' $?
printf 'sum=%s\n' "$(sed -n 's/.*"Sum": "\(.*\)",/\1/p' $W/dl.json)"
printf 'files=%s\n' "$(ls $GOMODCACHE/cache/download/github.com/!burnt!sushi/toml/@v/ 2>&1 | tr '\n' ' ')"
printf 'dl_err=%s\n' "$(tr '\n' ' ' < $W/dl.err)"
printf 'put=%s\n' "$(curl -s -o $W/put -w '%{http_code}' --max-time 30 -X PUT --data-binary x 'https://proxy.golang.org/github.com/!burnt!sushi/toml/@v/v9.9.9.zip') $(tr -d '\n' < $W/put)"
`

// go mod download under the go-modules example, for a module whose path
// needs case-escaping ("!"), verified against the checksum database; a
// PUT to the module proxy refused.
func TestGoModulesThroughReadOnlyRule(t *testing.T) {
	testutil.RequireReachable(t, "the Go module proxy", "proxy.golang.org:443")
	testutil.RequireCommand(t, "curl")
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		testutil.RequireData(t, "the go command", err)
	}
	goBin := filepath.Join(strings.TrimSpace(string(goroot)), "bin", "go")
	if real, err := filepath.EvalSymlinks(goBin); err == nil {
		goBin = real
	}
	extra := []string{"/usr/bin/curl"}
	if !exampleNames(t, "go-modules.yaml", goBin) {
		extra = append(extra, goBin) // a go installed elsewhere (the example names the usual places)
	}
	l := newRegistryLab(t, "go-modules.yaml", extra...)
	r := l.run(strings.ReplaceAll(goScript, "@GO@", goBin))
	if r["download"] != "0" || r["sum"] != "h1:o7IhLm0Msx3BaB+n3Ag7L8EVlByGnpq14C4YWiu/gL8=" {
		t.Errorf("go mod download: exit %q, sum %q; %q", r["download"], r["sum"], r["dl_err"])
	}
	if !strings.Contains(r["files"], "v1.3.2.zip") {
		t.Errorf("module cache holds %q, want v1.3.2.zip", r["files"])
	}
	if !strings.HasPrefix(r["put"], `403 {"error":"policy_denied"`) || !strings.Contains(r["put"], `"reason":"l7_access_denied","method":"PUT"`) {
		t.Errorf("PUT to the module proxy: %q, want 403 policy_denied", r["put"])
	}
	l.expectEvents(
		// The go command escapes "!" in module downloads (not in
		// checksum database lookups); the upstream gets either as sent.
		httpEvent{class: 4002, status: "allowed", method: "GET", host: "proxy.golang.org", path: "/github.com/%21burnt%21sushi/toml/@v/v1.3.2.zip"},
		httpEvent{class: 4002, status: "allowed", method: "GET", host: "proxy.golang.org", path: "/sumdb/sum.golang.org/lookup/github.com/!burnt!sushi/toml@v1.3.2"},
		httpEvent{class: 4002, status: "policy_denied", method: "PUT", host: "proxy.golang.org", reason: policy.L7AccessDenied},
	)
}

// exampleNames reports whether an example's network entry names exe.
func exampleNames(t *testing.T, file, exe string) bool {
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.LoadFile(filepath.Join(root, "policies", "examples", file))
	if err != nil {
		t.Fatal(err)
	}
	for _, np := range p.NetworkPolicies {
		for _, b := range np.Binaries {
			if policy.MatchBinary(b.Path, exe) {
				return true
			}
		}
	}
	return false
}

const aptScript = `
W=$PWD
mkdir -p $W/apt/lists/partial $W/apt/cache/archives/partial $W/apt/parts $W/apt/sources.d $W/dl
echo 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main' >$W/apt/sources.list
cat >$W/apt/apt.conf <<EOF
Dir::State::Lists "$W/apt/lists";
Dir::Cache "$W/apt/cache";
Dir::Etc::SourceList "$W/apt/sources.list";
Dir::Etc::SourceParts "$W/apt/sources.d";
Dir::Etc::Parts "$W/apt/parts";
Acquire::Languages "none";
Debug::NoLocking "true";
EOF
export APT_CONFIG=$W/apt/apt.conf
apt-get update >$W/update.log 2>&1; printf 'update=%s\n' $?
printf 'update_log=%s\n' "$(tail -3 $W/update.log | tr '\n' ' ')"
cd $W/dl && apt-get download hello >$W/download.log 2>&1; printf 'download=%s %s\n' $? "$(ls $W/dl)"
printf 'download_log=%s\n' "$(tail -3 $W/download.log | tr '\n' ' ')"
printf 'put=%s\n' "$(curl -s -o $W/put -w '%{http_code}' --max-time 30 -X PUT --data-binary x http://deb.debian.org/debian/pool/main/h/hello/hello_2.10-3_amd64.deb) $(tr -d '\n' < $W/put)"
`

// apt-get update and apt-get download through the forward proxy under the
// apt example (plain http://, decided request by request); a PUT to the
// archive refused.
func TestAptThroughForwardProxy(t *testing.T) {
	testutil.RequireReachable(t, "the Debian archive", "deb.debian.org:80")
	testutil.RequireCommand(t, "curl")
	requirePaths(t, "apt and the Debian archive keyring (packages apt, debian-archive-keyring)",
		"/usr/bin/apt-get", "/usr/lib/apt/methods/http", "/usr/share/keyrings/debian-archive-keyring.gpg",
		"/var/lib/apt", "/var/lib/dpkg", "/var/cache/apt")
	l := newRegistryLab(t, "apt.yaml", "/usr/bin/curl")
	r := l.run(aptScript)
	if r["update"] != "0" {
		t.Errorf("apt-get update: %q %q", r["update"], r["update_log"])
	}
	if !strings.HasPrefix(r["download"], "0 hello_") || !strings.HasSuffix(r["download"], ".deb") {
		t.Errorf("apt-get download: %q %q", r["download"], r["download_log"])
	}
	if !strings.HasPrefix(r["put"], `403 {"error":"policy_denied"`) || !strings.Contains(r["put"], `"reason":"l7_access_denied"`) {
		t.Errorf("PUT to the archive: %q, want 403 policy_denied", r["put"])
	}
	deb := strings.TrimPrefix(r["download"], "0 ")
	l.expectEvents(
		httpEvent{class: 4002, status: "allowed", method: "GET", host: "deb.debian.org", path: "/debian/dists/bookworm/InRelease"},
		httpEvent{class: 4002, status: "allowed", method: "GET", host: "deb.debian.org", path: "/debian/pool/main/h/hello/" + deb},
		httpEvent{class: 4002, status: "policy_denied", method: "PUT", host: "deb.debian.org", path: "/debian/pool/main/h/hello/" + deb, reason: policy.L7AccessDenied},
	)
}
