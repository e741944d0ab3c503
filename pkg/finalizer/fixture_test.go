package finalizer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// fixture is a real task workspace: a bare "remote", a clone that moves the
// canonical branch like other contributors would, and WORKSPACE/repo with
// the agent's committed and pending work, plus mac-evidence.json and
// finalizer-progress.json.
type fixture struct {
	t      *testing.T
	env    []string // for git in the tests and for Options.Env
	dir    string
	remote string
	other  string // another clone of the remote
	ws     string
	repo   string
	base   string // prepared base
	head   string // preserved HEAD
	ev     Evidence
}

func (f *fixture) git(dir string, args ...string) string {
	f.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(append([]string{}, f.env...),
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=Test Agent", "GIT_AUTHOR_EMAIL=agent@example.invalid",
		"GIT_COMMITTER_NAME=Test Agent", "GIT_COMMITTER_EMAIL=agent@example.invalid")
	out, err := cmd.CombinedOutput()
	if err != nil {
		f.t.Fatalf("git %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return strings.TrimSpace(string(out))
}

func (f *fixture) write(dir, name, content string, mode os.FileMode) {
	f.t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		f.t.Fatal(err)
	}
}

const contractScript = `#!/bin/sh
# The contract gate: the canonical change and the agent's work must both be present.
test -f canon.txt || { echo "canon.txt missing: not rebased onto canonical" >&2; exit 7; }
grep -q agent feature.txt || exit 8
exit 0
`

const sanityWrapper = `#!/bin/sh
exec sh scripts/contract.sh
`

// fixtureOpts shape the workspace.
type fixtureOpts struct {
	commitWrapper bool // scripts/run-sanity-tests.sh committed in the base
	// hardLinks clones the workspace as git clone does by default from a
	// local path: .git/objects hard-linked to the remote's.
	hardLinks bool
}

// newFixture builds the default refused-at-new-files workspace:
//
//	base: README.md, feature.txt, scripts/contract.sh
//	agent commit: feature.txt += "agent"
//	pending: README.md modified, src/new.go untracked, docs/added.md staged-new
//	canonical after base: canon.txt (pushed by another contributor)
func newFixture(t *testing.T, o fixtureOpts) *fixture {
	t.Helper()
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, dir: dir, env: []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "TMPDIR=" + dir}}
	f.remote = filepath.Join(dir, "remote.git")
	f.git(dir, "init", "-q", "--bare", "-b", "main", f.remote)
	seed := filepath.Join(dir, "seed")
	f.git(dir, "clone", "-q", f.remote, seed)
	f.git(seed, "checkout", "-q", "-b", "main")
	f.write(seed, "README.md", "# project\n", 0o644)
	f.write(seed, "feature.txt", "base\n", 0o644)
	f.write(seed, "scripts/contract.sh", contractScript, 0o755)
	if o.commitWrapper {
		f.write(seed, SanityWrapper, sanityWrapper, 0o755)
	}
	f.git(seed, "add", ".")
	f.git(seed, "commit", "-q", "-m", "base")
	f.git(seed, "push", "-q", "origin", "main")
	f.base = f.git(seed, "rev-parse", "HEAD")

	f.ws = filepath.Join(dir, "workspace")
	f.repo = filepath.Join(f.ws, "repo")
	if o.hardLinks {
		f.git(dir, "clone", "-q", f.remote, f.repo)
	} else {
		f.git(dir, "clone", "-q", "--no-hardlinks", f.remote, f.repo)
	}
	f.write(f.repo, "feature.txt", "base\nagent\n", 0o644)
	f.git(f.repo, "commit", "-q", "-am", "agent: implement feature")
	f.head = f.git(f.repo, "rev-parse", "HEAD")
	f.write(f.repo, "README.md", "# project\n\nagent notes\n", 0o644)
	f.write(f.repo, "src/new.go", "package src\n", 0o644)
	f.write(f.repo, "docs/added.md", "added\n", 0o644)
	f.git(f.repo, "add", "docs/added.md")

	// Canonical moves on after the task was prepared.
	f.other = seed
	f.write(seed, "canon.txt", "canonical\n", 0o644)
	f.git(seed, "add", "canon.txt")
	f.git(seed, "commit", "-q", "-m", "canonical moves on")
	f.git(seed, "push", "-q", "origin", "main")

	zero := 0
	f.ev = Evidence{
		Schema: EvidenceSchema, EvidenceID: "ev_0001", TaskID: "task_b1828d67", Repository: "repo",
		PreparedBaseSHA: f.base, PreservedHeadSHA: f.head, CanonicalBranch: "main",
		Remote: "origin", RemoteURL: f.remote,
		ContractCommand:      []string{"sh", "scripts/contract.sh"},
		VerificationCommands: [][]string{{"sh", "-c", "test -f src/new.go && test -f docs/added.md"}},
		TestEvidence:         []TestEvidence{{Argv: []string{"sh", "scripts/contract.sh"}, ExitCode: &zero}},
		Status:               EvidenceRefused, RefusalReason: RefusalNewFiles,
	}
	f.saveEvidence()
	f.saveProgress("refused")
	return f
}

func (f *fixture) saveEvidence() {
	f.t.Helper()
	data, err := json.MarshalIndent(f.ev, "", "  ")
	if err != nil {
		f.t.Fatal(err)
	}
	f.write(f.ws, EvidenceFile, string(data), 0o644)
}

func (f *fixture) saveProgress(status string) {
	f.t.Helper()
	if status == "" {
		os.Remove(filepath.Join(f.ws, ProgressFile))
		return
	}
	data, _ := json.Marshal(map[string]any{
		"schema": ProgressSchema, "evidence_id": f.ev.EvidenceID, "task_id": f.ev.TaskID,
		"status": status, "updated_at": "2026-10-02T11:00:00Z", "executor_pid": 4242,
	})
	f.write(f.ws, ProgressFile, string(data), 0o644)
}

// opts is a recovery request for the fixture. Its gates run on the host
// (UnsandboxedGates): these tests are about the git logic, and some gates
// reach outside their tree on purpose. sandbox_linux_test.go runs the
// gates confined.
func (f *fixture) opts() Options {
	return Options{Env: f.env, EvidenceID: f.ev.EvidenceID, Remote: f.remote, Approve: []string{"docs/added.md", "src/new.go"}, UnsandboxedGates: true}
}

func (f *fixture) remoteMain() string {
	f.t.Helper()
	return f.git(f.dir, "--git-dir", f.remote, "rev-parse", "refs/heads/main")
}

func exitCodeP(n int) *int { return &n }

// snapshot hashes every file, directory and symlink below dir (including
// .git): path, type, mode and content. Any write, index refresh, new ref or
// lock file changes it.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out[rel] = "link:" + target
		case d.IsDir():
			out[rel] = "dir:" + info.Mode().String()
		default:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(data)
			out[rel] = info.Mode().String() + ":" + hex.EncodeToString(sum[:])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func diffSnapshots(a, b map[string]string) []string {
	var d []string
	for k, v := range a {
		if w, ok := b[k]; !ok {
			d = append(d, "removed "+k)
		} else if w != v {
			d = append(d, "changed "+k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			d = append(d, "added "+k)
		}
	}
	sort.Strings(d)
	return d
}

// repoState is the repository-level view the issue asks to compare: refs,
// HEAD, index, status and working-tree hashes.
func (f *fixture) repoState() string {
	f.t.Helper()
	idx, err := os.ReadFile(filepath.Join(f.repo, ".git", "index"))
	if err != nil {
		f.t.Fatal(err)
	}
	sum := sha256.Sum256(idx)
	return strings.Join([]string{
		f.git(f.repo, "for-each-ref", "--format=%(refname) %(objectname)"),
		f.git(f.repo, "rev-parse", "HEAD"),
		hex.EncodeToString(sum[:]),
		f.git(f.repo, "--no-optional-locks", "status", "--porcelain=v1", "--untracked-files=all"),
		f.git(f.repo, "worktree", "list", "--porcelain"),
	}, "\n")
}
