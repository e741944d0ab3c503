package finalizer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// mirror is the private repository recovery works in. Git never runs in
// the agent's .git: after the checks, the objects, the index and the HEAD
// commit are copied (descriptor-relative, no symlink followed, regular
// files only) into a fresh repository in a 0700 temporary directory, and
// every git command runs there. The agent's working tree is read by git
// status (started in the checked directory) and, for the commit, through
// a private snapshot of the listed paths; nothing is ever written to it.
type mirror struct {
	tmp    string // private directory: the mirror, index copies, worktrees
	gitDir string
	index  string // copy of the preserved index ("" when there was none)
	format string // object format
	head   string // the preserved repository's HEAD commit
	git    *gitRunner
}

func (m *mirror) remove() {
	if m != nil {
		os.RemoveAll(m.tmp)
	}
}

// work returns a runner for the agent's working tree, the directory repo
// inspection checked, with the mirror as repository and index as the
// index. git starts in that directory through its descriptor
// (/proc/self/fd/N, entered before exec), not by the repository's name,
// which a live agent owning the workspace could swap after the checks;
// git then resolves it to its current path, leaving only the moment of
// its own start-up to race.
func (m *mirror) work(repo *safeDir, index string) *gitRunner {
	g := m.workTree(".", index)
	g.dir = repo.procPath()
	return g
}

// workTree returns a runner for the working tree dir with the mirror as
// repository and index as the index.
func (m *mirror) workTree(dir, index string) *gitRunner {
	g := m.git.withArgs("--work-tree=" + dir)
	if index != "" {
		g = g.withEnv("GIT_INDEX_FILE=" + index)
	}
	return g
}

// workspace holds the descriptors of a workspace under inspection.
type wsHandles struct {
	ws, repo, git *safeDir
	repoRel       string
}

func (w *wsHandles) close() {
	if w == nil {
		return
	}
	w.git.close()
	w.repo.close()
	w.ws.close()
}

// repoStillSame reports whether the repository path still names the
// directory that was checked (a writable workspace could swap it).
func (w *wsHandles) repoStillSame() bool {
	return w.ws.sameDir(w.repoRel, w.repo) && w.repo.sameDir(".git", w.git)
}

// openRepository checks the repository below the workspace and builds the
// mirror. Problems are refusals in p; stop says the inspection cannot go
// on. Nothing runs git before every check on the agent's files passed.
func openRepository(ctx context.Context, p *Plan, w *wsHandles, opts Options) (m *mirror, stop bool, err error) {
	ev := p.ev
	repoD, err := w.ws.openDir(ev.Repository)
	if err != nil {
		return nil, true, refuseOrFail(p, "repository", err)
	}
	w.repo = repoD
	gitD, err := repoD.openDir(".git")
	if err != nil {
		return nil, true, refuseOrFail(p, "repository .git", err)
	}
	w.git = gitD
	euid := os.Geteuid()
	if !repoD.ownedBy(euid) || !gitD.ownedBy(euid) {
		p.refuse("repository %s is not owned by this user (uid %d); run finalizer-recover as the workspace owner", quotePath(p.Repository), euid)
		return nil, true, nil
	}
	for _, d := range []*safeDir{repoD, gitD} {
		if why := d.changeableByOthers(); why != "" {
			p.refuse("refusing %s: %s", quotePath(d.path), why)
			return nil, true, nil
		}
	}
	for _, scan := range []struct {
		d    *safeDir
		scan func(context.Context, *safeDir) ([]string, error)
	}{{gitD, scanGitDir}, {repoD, scanWorkTree}} {
		refusals, err := scan.scan(ctx, scan.d)
		if err != nil {
			return nil, true, err
		}
		for _, r := range refusals {
			p.refuse("%s", r)
		}
		if len(refusals) > 0 {
			return nil, true, nil
		}
	}

	tmp, err := os.MkdirTemp("", "finalizer-recover-")
	if err != nil {
		return nil, true, err
	}
	m = &mirror{tmp: tmp, gitDir: filepath.Join(tmp, "mirror.git")}
	defer func() {
		if m != nil && (stop || err != nil) {
			m.remove()
			m = nil
		}
	}()
	base := newGitRunner(tmp, envOrDefault(opts.Env), identityOrDefault(opts.Identity)).
		withEnv("GIT_CEILING_DIRECTORIES=" + tmp)

	// The agent's config: parsed from a private copy, checked, never used.
	format := "sha1"
	var entries []configEntry
	if gitD.exists("config") {
		cfg := filepath.Join(tmp, "agent-config")
		if _, err := gitD.copyFile(ctx, "config", cfg, maxConfigBytes); err != nil {
			return m, true, refuseOrFail(p, "config", err)
		}
		if entries, err = base.configFile(ctx, cfg); err != nil {
			p.refuse("%s: git cannot parse it", quotePath(gitD.join("config")))
			return m, true, nil
		}
	}
	if checkRepoConfig(entries, p, gitD.join("config")) {
		return m, true, nil
	}
	for _, e := range entries {
		if e.section == "extensions" && e.key == "objectformat" {
			format = e.value
		}
	}
	if format != "sha1" && format != "sha256" {
		p.refuse("%s: extensions.objectformat %q is not supported", quotePath(gitD.join("config")), format)
		return m, true, nil
	}
	m.format = format
	hashLen := 20
	if format == "sha256" {
		hashLen = 32
	}
	// Planned, checked and budgeted before anything is copied: sparse
	// files, packs that do not match their index, and totals beyond
	// twice the disk space the files occupy are refused by name.
	plan, err := planRepoCopy(ctx, gitD, hashLen, tmp)
	if err != nil {
		return m, true, refuseOrFail(p, "objects", err)
	}
	m.index = filepath.Join(tmp, "index") // git creates an empty one if none is copied

	if _, err := base.run(ctx, nil, "init", "--quiet", "--bare", "--template=", "--object-format="+format, "--end-of-options", m.gitDir); err != nil {
		return m, true, fmt.Errorf("creating the private mirror: %w", err)
	}
	m.git = newGitRunner(tmp, envOrDefault(opts.Env), identityOrDefault(opts.Identity)).withArgs("--git-dir=" + m.gitDir)
	if _, err := m.git.run(ctx, nil, "config", "core.bare", "false"); err != nil {
		return m, true, fmt.Errorf("configuring the private mirror: %w", err)
	}
	if err := plan.copy(ctx, gitD, m); err != nil {
		return m, true, refuseOrFail(p, "objects", err)
	}

	head, err := resolveHead(gitD)
	if err != nil {
		p.refuse("preserved repository has no HEAD commit: %v", err)
		return m, true, nil
	}
	if _, err := m.git.line(ctx, "rev-parse", "--verify", "--quiet", "--end-of-options", head+"^{commit}"); err != nil {
		p.refuse("preserved repository has no HEAD commit: %s is not a commit in %s", head, quotePath(gitD.join("objects")))
		return m, true, nil
	}
	if _, err := m.git.run(ctx, nil, "update-ref", "--no-deref", "HEAD", head); err != nil {
		return m, true, fmt.Errorf("private mirror: %w", err)
	}
	// git trusts a pack's .idx (and a loose object's name) for which
	// content an object id has, and does not rehash what it reads: a forged
	// index could give an object the remote already has other content in
	// the mirror, so that the gates test a tree that is not the one the
	// push publishes. fsck --full rehashes every object.
	if _, err := m.git.run(ctx, nil, "fsck", "--full", "--no-dangling", "--no-reflogs", "--no-progress"); err != nil {
		if ctx.Err() != nil {
			return m, true, err
		}
		p.refuse("objects in %s do not match their object ids, or HEAD's history is incomplete (git fsck --full failed); they could make the gates test another tree than the one pushed", quotePath(gitD.join("objects")))
		return m, true, nil
	}
	m.head = head
	return m, false, nil
}

// refuseOrFail turns a special-file error into a refusal and passes other
// errors on.
func refuseOrFail(p *Plan, what string, err error) error {
	var sfe *SpecialFileError
	switch {
	case errors.As(err, &sfe):
		p.refuse("%s", sfe.Error())
		return nil
	case errors.Is(err, fs.ErrNotExist):
		p.refuse("%s missing: %v", what, err)
		return nil
	}
	return err
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return s != ""
}

// resolveHead reads HEAD and the ref it names (loose, then packed) from
// the agent's .git without git: small regular files, no symlink followed.
func resolveHead(gitD *safeDir) (string, error) {
	ref := "HEAD"
	for range 5 {
		val, err := readRef(gitD, ref)
		if err != nil {
			return "", err
		}
		if target, ok := strings.CutPrefix(val, "ref: "); ok {
			if !validRefName(target) {
				return "", fmt.Errorf("%s names %q, not a ref", ref, target)
			}
			ref = target
			continue
		}
		if objectIDRE.MatchString(val) {
			return val, nil
		}
		return "", fmt.Errorf("%s does not hold an object id", ref)
	}
	return "", errors.New("HEAD: too many levels of symbolic refs")
}

func readRef(gitD *safeDir, ref string) (string, error) {
	if ref == "HEAD" {
		data, err := gitD.readFile("HEAD", maxRefBytes)
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(string(data)), nil
	}
	dir, base := path.Split(ref)
	d, err := gitD.openDir(strings.TrimSuffix(dir, "/"))
	if err == nil {
		data, rerr := d.readFile(base, maxRefBytes)
		d.close()
		if rerr == nil {
			return strings.TrimSpace(string(data)), nil
		}
		if !errors.Is(rerr, fs.ErrNotExist) {
			return "", rerr
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if !gitD.exists("packed-refs") {
		return "", fmt.Errorf("%s does not exist (unborn branch)", ref)
	}
	data, err := gitD.readFile("packed-refs", maxPackedRefBytes)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if line == "" || line[0] == '#' || line[0] == '^' {
			continue
		}
		if oid, name, ok := strings.Cut(line, " "); ok && name == ref && objectIDRE.MatchString(oid) {
			return oid, nil
		}
	}
	return "", fmt.Errorf("%s does not exist (unborn branch)", ref)
}

// validRefName accepts refs/... names whose components are plain.
func validRefName(ref string) bool {
	if !strings.HasPrefix(ref, "refs/") || hasControl(ref) || strings.HasSuffix(ref, ".lock") {
		return false
	}
	for _, c := range strings.Split(ref, "/") {
		if c == "" || c == "." || c == ".." || strings.HasPrefix(c, ".") {
			return false
		}
	}
	return !strings.ContainsAny(ref, " ~^:?*[\\")
}
