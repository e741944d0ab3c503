package egress

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func values(refs []Ref) []string {
	var out []string
	for _, r := range refs {
		out = append(out, fmt.Sprintf("%d %s", r.Line, r.Value))
	}
	return out
}

func TestParse(t *testing.T) {
	cases := []struct {
		kind Kind
		in   string
		want []string
	}{
		{KindNpmrc, `# comment
; comment
registry=https://registry.npmjs.org/
@corp:registry = "https://npm.corp.example/"
//npm.corp.example/:_authToken=SECRET
always-auth=true
@scope:registry=${NPM_REGISTRY}
strict-ssl=false
`, []string{"3 https://registry.npmjs.org/", "4 https://npm.corp.example/", "7 ${NPM_REGISTRY}"}},

		// v1: nested dependencies.
		{KindPackageLock, `{"lockfileVersion":1,"dependencies":{
 "a":{"version":"1.0.0","resolved":"https://registry.npmjs.org/a/-/a-1.0.0.tgz",
  "dependencies":{"b":{"version":"2.0.0","resolved":"https://nested.example.com/b.tgz","requires":{"resolved":"x"}}}},
 "local":{"version":"file:../local","resolved":"file:../local"},
 "resolved":{"version":"1.0.0","resolved":"https://registry.yarnpkg.com/resolved/-/resolved-1.0.0.tgz"}}}`,
			[]string{"2 https://registry.npmjs.org/a/-/a-1.0.0.tgz", "3 https://nested.example.com/b.tgz", "5 https://registry.yarnpkg.com/resolved/-/resolved-1.0.0.tgz"}},
		// v3: packages; keys named "resolved" that are not values are ignored.
		{KindPackageLock, `{"lockfileVersion":3,"packages":{"":{"name":"x"},"node_modules/resolved":{"resolved":"https://registry.npmjs.org/resolved/-/r.tgz"},"node_modules/g":{"resolved":"git+ssh://git@github.com/a/b.git#abc"},"node_modules/n":{"resolved":["https://array.example.com/"]}}}`,
			[]string{"1 https://registry.npmjs.org/resolved/-/r.tgz", "1 git+ssh://git@github.com/a/b.git#abc"}},

		{KindYarnLock, `# yarn lockfile v1
"left-pad@^1.3.0":
  version "1.3.0"
  resolved "https://registry.yarnpkg.com/left-pad/-/left-pad-1.3.0.tgz#abc"
  integrity sha512-x
resolvedfoo "https://not.example.com/"
`, []string{"4 https://registry.yarnpkg.com/left-pad/-/left-pad-1.3.0.tgz#abc"}},

		{KindPnpmLock, `lockfileVersion: '9.0'
settings:
  autoInstallPeers: true
packages:
  left-pad@1.3.0:
    resolution: {integrity: sha512-x, tarball: https://npm.corp.example/left-pad-1.3.0.tgz}
  other@1.0.0:
    resolution:
      tarball: 'https://registry.npmjs.org/other/-/other-1.0.0.tgz'
  gitdep@1.0.0:
    resolution: {commit: abc, repo: https://github.com/a/b.git, type: git}
registry: "https://registry.npmjs.org/"
`, []string{"6 https://npm.corp.example/left-pad-1.3.0.tgz", "9 https://registry.npmjs.org/other/-/other-1.0.0.tgz", "11 https://github.com/a/b.git", "12 https://registry.npmjs.org/"}},

		{KindRequirements, `# pinned
--index-url https://pypi.org/simple
--extra-index-url=https://pkgs.corp.example/simple # mirror
-i https://a.example.com/simple
-ihttps://b.example.com/simple
-f ./wheels
--find-links https://wheels.example.com/
-r other.txt
flask==3.0 \
    --hash=sha256:00
mypkg @ https://files.example.com/mypkg-1.0.tar.gz
git+https://github.com/a/b.git#egg=b
requests # https://comment.example.com/
--trusted-host insecure.example.com
`, []string{"2 https://pypi.org/simple", "3 https://pkgs.corp.example/simple", "4 https://a.example.com/simple", "5 https://b.example.com/simple",
			"7 https://wheels.example.com/", "11 https://files.example.com/mypkg-1.0.tar.gz", "12 git+https://github.com/a/b.git#egg=b"}},

		{KindUVLock, uvLock, []string{"7 https://pypi.org/simple", "8 https://files.pythonhosted.org/packages/flask-3.0.0.tar.gz",
			"10 https://files.pythonhosted.org/packages/flask-3.0.0-py3-none-any.whl", "16 https://git.corp.example/internal.git?rev=main#abc"}},

		{KindPoetryLock, `[[package]]
name = "internal"
version = "1.0"
files = [
    {file = "internal-1.0.tar.gz", hash = "sha256:00"},
]

[package.source]
type = "legacy"
url = "https://pypi.corp.example/simple"
reference = "corp"

[metadata]
content-hash = "00"
`, []string{"10 https://pypi.corp.example/simple"}},
	}
	for _, c := range cases {
		refs, err := Parse(c.kind, []byte(c.in))
		if err != nil {
			t.Errorf("%s: %v", c.kind, err)
		}
		if got := values(refs); !slices.Equal(got, c.want) {
			t.Errorf("%s:\n got %q\nwant %q", c.kind, got, c.want)
		}
	}
}

func TestParseRefusesPathologicalInput(t *testing.T) {
	deep := strings.Repeat(`{"a":`, 100000) + "1" + strings.Repeat("}", 100000)
	if _, err := Parse(KindPackageLock, []byte(deep)); err == nil || !strings.Contains(err.Error(), "nested deeper") {
		t.Errorf("deep JSON: %v", err)
	}
	arr := strings.Repeat("[", 100000)
	if _, err := Parse(KindPackageLock, []byte(arr)); err == nil {
		t.Error("unterminated deep arrays accepted")
	}
	// References before the error are kept.
	partial := `{"packages":{"a":{"resolved":"https://registry.npmjs.org/a.tgz"}, "b": tru`
	refs, err := Parse(KindPackageLock, []byte(partial))
	if err == nil || len(refs) != 1 {
		t.Errorf("partial JSON: refs %v err %v", refs, err)
	}
	long := "resolved \"https://" + strings.Repeat("a", 2<<20) + ".example.com/\"\n"
	if _, err := Parse(KindYarnLock, []byte(long)); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("long line: %v", err)
	}
	// A long value is ignored, not emitted.
	refs, _ = Parse(KindNpmrc, []byte("registry=https://"+strings.Repeat("a", 9000)+".example.com/\n"))
	if len(refs) != 0 {
		t.Errorf("oversized value emitted")
	}
	if _, err := Parse("bogus", nil); err == nil {
		t.Error("unknown kind accepted")
	}
}

func TestKindOf(t *testing.T) {
	for rel, want := range map[string]Kind{
		".npmrc": KindNpmrc, "web/.npmrc": KindNpmrc, "package-lock.json": KindPackageLock, "a/npm-shrinkwrap.json": KindPackageLock,
		"yarn.lock": KindYarnLock, "pnpm-lock.yaml": KindPnpmLock, "requirements.txt": KindRequirements,
		"requirements-dev.txt": KindRequirements, "requirements/test.txt": KindRequirements, "uv.lock": KindUVLock,
		"poetry.lock": KindPoetryLock, "package.json": kindNone, "notes.txt": kindNone, "requirements.in": kindNone,
	} {
		if got := KindOf(rel); got != want {
			t.Errorf("KindOf(%q) = %q, want %q", rel, got, want)
		}
	}
}

func TestHostOfURL(t *testing.T) {
	for raw, want := range map[string]struct {
		host   string
		reason Reason
	}{
		"https://registry.npmjs.org/a.tgz":          {"registry.npmjs.org", ""},
		"HTTPS://Registry.NPMJS.org:443/a":          {"registry.npmjs.org", ""},
		"git+https://github.com/a/b.git":            {"github.com", ""},
		"https://user:pw@npm.corp.example/":         {"npm.corp.example", ""},
		"http://registry.npmjs.org/a.tgz":           {"registry.npmjs.org", ReasonScheme},
		"git+ssh://git@github.com/a/b":              {"github.com", ReasonScheme},
		"ftp://files.example.com/":                  {"files.example.com", ReasonScheme},
		"https://registry.npmjs.org:8443/":          {"registry.npmjs.org", ReasonPort},
		"https://10.0.0.1/simple":                   {"10.0.0.1", ReasonIPLiteral},
		"https://[2001:db8::1]/simple":              {"2001:db8::1", ReasonIPLiteral},
		"https://localhost/":                        {"localhost", ReasonMalformedHost},
		"https://a_b-.example.com/":                 {"a_b-.example.com", ReasonMalformedHost},
		"${NPM_REGISTRY}":                           {"", ReasonUnparsable},
		"registry.npmjs.org":                        {"", ReasonUnparsable},
		"https://exa mple.com/":                     {"", ReasonUnparsable},
		"https:///path":                             {"", ReasonUnparsable},
		"mailto:a@b.example.com":                    {"", ReasonUnparsable},
		"https://registry.npmjs.org./":              {"registry.npmjs.org.", ReasonMalformedHost},
		"https://xn--e1afmkfd.example.com/":         {"xn--e1afmkfd.example.com", ""},
		"https://%72egistry.npmjs.org/":             {"", ReasonUnparsable},
		"https://registry.npmjs.org@evil.example/x": {"evil.example", ""},
	} {
		h, r, _ := HostOfURL(raw)
		if h != want.host || r != want.reason {
			t.Errorf("HostOfURL(%q) = %q %q, want %q %q", raw, h, r, want.host, want.reason)
		}
	}
}

// A hostile working tree: a huge lockfile, a deeply nested one, symbolic
// links out of the repository (file and directory), a FIFO with a
// lockfile name, a directory named like a lockfile, and lockfiles below
// the depth limit. Derivation finishes quickly, reads none of them, and
// still reads the honest lockfile.
func TestDeriveHostileRepository(t *testing.T) {
	repo := writeRepo(t, map[string]string{
		"app/package-lock.json": evilLock,
		"deep/requirements.txt": "-i https://" + strings.Repeat("x", 10) + ".example.com/\n",
	})
	huge := filepath.Join(repo, "yarn.lock")
	f, err := os.Create(huge)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 40); err != nil { // sparse 1 TiB
		t.Fatal(err)
	}
	f.Close()
	nested := strings.Repeat(`{"dependencies":`, 50000) + "{}" + strings.Repeat("}", 50000)
	if err := os.WriteFile(filepath.Join(repo, "npm-shrinkwrap.json"), []byte(nested), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(repo, "package-lock.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(repo, "etc")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../../../../etc/passwd", filepath.Join(repo, "app", "poetry.lock")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(repo, "uv.lock"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(repo, ".npmrc"), 0o755); err != nil {
		t.Fatal(err)
	}
	tooDeep := filepath.Join(repo, "a", "b", "c", "d", "e", "f", "g", "h", "i", "j")
	os.MkdirAll(tooDeep, 0o755)
	os.WriteFile(filepath.Join(tooDeep, "requirements.txt"), []byte("-i https://too-deep.example.com/\n"), 0o644)

	done := make(chan struct{})
	var d *Derivation
	go func() {
		defer close(done)
		d, err = Derive(repo, Limits{})
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Derive hung on a hostile repository")
	}
	if err != nil {
		t.Fatal(err)
	}
	skipped := map[string]string{}
	for _, s := range d.Skipped {
		skipped[s.Path] = s.Reason
	}
	for p, want := range map[string]string{
		"yarn.lock":           "larger than",
		"npm-shrinkwrap.json": "nested deeper",
		"package-lock.json":   "symbolic link",
		"app/poetry.lock":     "symbolic link",
		"uv.lock":             "not a regular file",
	} {
		if !strings.Contains(skipped[p], want) {
			t.Errorf("%s: skipped reason %q, want %q (all %v)", p, skipped[p], want, skipped)
		}
	}
	var hosts []string
	for _, c := range d.Candidates {
		hosts = append(hosts, c.Host)
		if strings.Contains(c.Host, "root") || c.Host == "too-deep.example.com" {
			t.Errorf("unexpected candidate %+v", c)
		}
	}
	if !slices.Contains(hosts, "registry.npmjs.org") || !slices.Contains(hosts, "evil.example") || !slices.Contains(hosts, "xxxxxxxxxx.example.com") {
		t.Errorf("honest lockfiles not read: %v", hosts)
	}
	for _, f := range d.Files {
		if strings.HasPrefix(f, "etc/") {
			t.Errorf("followed a directory symlink: %s", f)
		}
	}

	// Through Expand: the decision reports the skips and the grant still works.
	base := operatorBase(t)
	out, dec := Expand(Options{Base: base, Repo: repo})
	if !dec.Expanded || len(dec.Skipped) < 5 || bytes.Contains(out, []byte("root:")) {
		t.Errorf("expand over hostile repo: %+v", dec)
	}
}

func TestDeriveLimits(t *testing.T) {
	files := map[string]string{}
	for i := range 20 {
		files[fmt.Sprintf("p%02d/requirements.txt", i)] = fmt.Sprintf("-i https://h%02d.example.com/\n", i)
	}
	repo := writeRepo(t, files)
	d, err := Derive(repo, Limits{MaxFiles: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Files) != 5 || len(d.Candidates) != 5 || !strings.Contains(d.Skipped[0].Reason, "more than 5 recognised files") {
		t.Errorf("files %v skipped %v", d.Files, d.Skipped)
	}
	d, _ = Derive(repo, Limits{MaxHosts: 3})
	if len(d.Candidates) != 3 {
		t.Errorf("MaxHosts: %d candidates", len(d.Candidates))
	}
	d, _ = Derive(repo, Limits{MaxEntries: 10})
	if len(d.Files) >= 20 || len(d.Skipped) == 0 {
		t.Errorf("MaxEntries: files %v skipped %v", d.Files, d.Skipped)
	}
	d, _ = Derive(repo, Limits{MaxTotalBytes: 60})
	if len(d.Files) > 3 {
		t.Errorf("MaxTotalBytes: files %v", d.Files)
	}
}
