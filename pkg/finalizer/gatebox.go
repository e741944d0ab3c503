package finalizer

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/sandbox"
)

// GateSandboxName is the supervisor binary looked up when
// Options.GateSandbox is empty.
const GateSandboxName = "sandbox-supervisor"

// GateSetup says where the gates run. Recovery runs every gate inside
// sandbox-supervisor unless the operator opted out with
// Options.UnsandboxedGates.
type GateSetup struct {
	Sandboxed bool `json:"sandboxed"`
	// Sandbox is the absolute path of sandbox-supervisor.
	Sandbox string `json:"sandbox,omitempty"`
	// Policy is the policy the sandbox uses: a file, or
	// "bundled:default-policy.yaml"; PolicySource says why (flag, env,
	// home, bundled) and PolicySHA256 is its canonical checksum.
	Policy       string `json:"policy,omitempty"`
	PolicySource string `json:"policy_source,omitempty"`
	PolicySHA256 string `json:"policy_sha256,omitempty"`
	// UID and GID the gates run as: the policy's identity when
	// sandboxed, this process's when not.
	UID int `json:"uid"`
	GID int `json:"gid"`

	// policyFlag is passed to the supervisor as --policy ("" for the
	// bundled default, which the supervisor resolves itself).
	policyFlag string
	// env is the supervisor's environment.
	env []string
}

// errNoGateSandbox prefixes every reason recovery cannot confine its gates.
const errNoGateSandbox = "refusing to run repository code on the host"

// resolveGateSetup decides where the gates run. Without the opt-in it
// insists on a usable sandbox: the supervisor found and executable, this
// process root (the supervisor needs it), the policy resolvable in the
// supervisor's environment and its identity resolvable and not root. It
// only reads.
func resolveGateSetup(opts Options) (*GateSetup, error) {
	base := envOrDefault(opts.Env)
	if opts.UnsandboxedGates {
		return &GateSetup{UID: os.Geteuid(), GID: os.Getegid()}, nil
	}
	sup := opts.GateSandbox
	var err error
	if sup == "" {
		sup, err = findGateSandbox(lookupEnv(base, "PATH"))
	} else {
		sup, err = usableExecutable(sup, "--gate-sandbox")
	}
	if err != nil {
		return nil, err
	}
	if euid := os.Geteuid(); euid != 0 {
		return nil, fmt.Errorf("%s needs root to create a sandbox, and this process runs as uid %d", sup, euid)
	}
	// Resolve as the supervisor would, in the environment it will get.
	flagPath := opts.GatePolicy
	if flagPath != "" {
		if flagPath, err = filepath.Abs(flagPath); err != nil {
			return nil, fmt.Errorf("--gate-policy: %w", err)
		}
	}
	res, err := policy.Resolve(policy.ResolveOptions{Flag: flagPath, Getenv: func(k string) string { return lookupEnv(base, k) }})
	if err != nil {
		return nil, fmt.Errorf("gate policy: %w", err)
	}
	uid, gid, err := sandbox.ResolveIdentity(res.Policy.Process.RunAsUser, res.Policy.Process.RunAsGroup)
	if err != nil {
		return nil, fmt.Errorf("gate policy %s: %w", res.Path, err)
	}
	gs := &GateSetup{
		Sandboxed: true, Sandbox: sup, Policy: res.Path, PolicySource: string(res.Source),
		PolicySHA256: res.Policy.Checksum(), UID: int(uid), GID: int(gid),
	}
	if res.Source != policy.SourceBundled {
		// Pin the file this resolution chose, so the supervisor cannot
		// pick another one than the identity above was taken from.
		if gs.policyFlag, err = filepath.Abs(res.Path); err != nil {
			return nil, err
		}
		gs.Policy = gs.policyFlag
	}
	// A fixed sandbox name would make the second gate's sandbox collide
	// with the first's.
	gs.env = gateEnv(base, "MAC_OPENSHELL_SANDBOX_NAME")
	return gs, nil
}

// gateEnv is base without SSH_AUTH_SOCK (root's SSH agent serves git's
// fetch and push to the operator's --remote, never repository code) and
// without the extra keys.
func gateEnv(base []string, drop ...string) []string {
	var env []string
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if k != "SSH_AUTH_SOCK" && !slices.Contains(drop, k) {
			env = append(env, kv)
		}
	}
	return env
}

// findGateSandbox looks for sandbox-supervisor next to this executable,
// then in the absolute directories of pathList.
func findGateSandbox(pathList string) (string, error) {
	var tried []string
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), GateSandboxName)
		if _, err := usableExecutable(p, ""); err == nil {
			return p, nil
		}
		tried = append(tried, filepath.Dir(exe))
	}
	for _, dir := range filepath.SplitList(pathList) {
		if !filepath.IsAbs(dir) {
			continue // a relative PATH entry could name the repository
		}
		p := filepath.Join(dir, GateSandboxName)
		if _, err := usableExecutable(p, ""); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no %s next to this executable (%s) or on PATH", GateSandboxName, strings.Join(tried, ", "))
}

// usableExecutable checks that p is an executable regular file and returns
// its absolute path.
func usableExecutable(p, flag string) (string, error) {
	name := p
	if flag != "" {
		name = flag + " " + p
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("%s: not an executable file", name)
	}
	return abs, nil
}

func lookupEnv(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val // the last one wins, as in exec
		}
	}
	return v
}

// gateCommand is one gate invocation: argv run in dir, on the host or
// through the supervisor.
type gateCommand struct {
	argv      []string
	dir       string
	env       []string
	sandboxed bool
}

// command builds the invocation of argv for a gate tree at dir.
func (gs *GateSetup) command(dir string, argv, hostEnv []string) gateCommand {
	if !gs.Sandboxed {
		return gateCommand{argv: argv, dir: dir, env: hostEnv}
	}
	a := []string{gs.Sandbox, "run", "--kind", "verify", "--workdir", dir, "--log-level", "warn", "--status-fd", "3"}
	if gs.policyFlag != "" {
		a = append(a, "--policy", gs.policyFlag)
	}
	a = append(a, "--")
	a = append(a, argv...)
	// The supervisor runs in this process's directory so that relative
	// paths in its own knobs mean what the operator meant; the gate runs
	// in --workdir. Its outcome comes back on descriptor 3 (a pipe only
	// it holds: runGate), never from the gate's output.
	return gateCommand{argv: a, env: gs.env, sandboxed: true}
}

// gateTree is the throwaway clone the gates run in.
type gateTree struct {
	dir     string
	rebased string
	format  string      // object format: sha1 or sha256
	entries []treeEntry // the rebased commit's tree, recursively
}

type treeEntry struct {
	mode, oid, path string
	size            int64
}

// prepareGateTree clones the repository into a fresh directory, checks out
// rebased detached and byte for byte (no attribute conversions: the tested
// bytes are the pushed blobs), hands it to the gate identity when
// sandboxed, and proves the checkout matches. The caller removes dir.
func prepareGateTree(ctx context.Context, g *gitRunner, repo, rebased string, gs *GateSetup) (*gateTree, error) {
	format, err := g.line(ctx, "rev-parse", "--show-object-format")
	if err != nil {
		return nil, err
	}
	out, err := g.run(ctx, nil, "ls-tree", "-r", "-l", "-z", "--full-tree", "--end-of-options", rebased)
	if err != nil {
		return nil, err
	}
	entries, err := parseTree(out)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "finalizer-recover-gate-")
	if err != nil {
		return nil, err
	}
	gt := &gateTree{dir: dir, rebased: rebased, format: format, entries: entries}
	if _, err := g.withArgs(allowFileProtocol...).run(ctx, nil, "clone", "--quiet", "--no-hardlinks", "--no-checkout", "--template=", "--end-of-options", repo, dir); err != nil {
		return gt, err
	}
	info := filepath.Join(dir, ".git", "info")
	if err := os.MkdirAll(info, 0o755); err != nil {
		return gt, err
	}
	if err := os.WriteFile(filepath.Join(info, "attributes"), []byte("* -text -eol -ident -filter -working-tree-encoding\n"), 0o644); err != nil {
		return gt, err
	}
	if _, err := g.with(dir).run(ctx, nil, "checkout", "--quiet", "--detach", rebased, "--"); err != nil {
		return gt, err
	}
	if gs.Sandboxed {
		if err := lchownTree(dir, gs.UID, gs.GID); err != nil {
			return gt, err
		}
	}
	if err := gt.verify(); err != nil {
		return gt, fmt.Errorf("the gate clone does not match %s before any gate ran: %w", short(rebased), err)
	}
	return gt, nil
}

func parseTree(out []byte) ([]treeEntry, error) {
	var entries []treeEntry
	for _, rec := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		if rec == "" {
			continue
		}
		// "<mode> <type> <oid> <size>\t<path>"
		meta, p, ok := strings.Cut(rec, "\t")
		f := strings.Fields(meta)
		if !ok || len(f) != 4 {
			return nil, fmt.Errorf("git ls-tree: unexpected record %q", rec)
		}
		size, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil {
			size = -1 // a gitlink; refused by the mode check
		}
		entries = append(entries, treeEntry{mode: f[0], oid: f[2], path: p, size: size})
	}
	return entries, nil
}

// lchownTree gives every entry below and including dir to uid:gid without
// following symlinks.
func lchownTree(dir string, uid, gid int) error {
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

// TreeMismatchError lists the tracked paths whose content in the gate
// clone differs from the commit.
type TreeMismatchError struct{ Paths []string }

func (e *TreeMismatchError) Error() string {
	p := e.Paths
	more := ""
	if len(p) > 20 {
		p, more = p[:20], fmt.Sprintf(" and %d more", len(e.Paths)-20)
	}
	return strings.Join(p, ", ") + more
}

// HeadMovedError says the gate clone's HEAD is no longer the tested commit.
type HeadMovedError struct{ Got, Want string }

func (e *HeadMovedError) Error() string {
	return fmt.Sprintf("HEAD of the gate clone is %q, want %s", e.Got, e.Want)
}

// verify checks, without running git in a tree the gate could have
// configured, that the clone's HEAD is still the rebased commit (detached)
// and that every tracked path holds exactly the commit's blob with its
// mode. It reads .git/HEAD and hashes the files itself; no symlink is
// followed. Untracked files are allowed.
func (gt *gateTree) verify() error {
	head, err := readHead(gt.dir)
	if err != nil {
		return err
	}
	if head != gt.rebased {
		return &HeadMovedError{Got: head, Want: gt.rebased}
	}
	root, err := os.OpenRoot(gt.dir)
	if err != nil {
		return err
	}
	defer root.Close()
	var newHash func() hash.Hash
	switch gt.format {
	case "sha1":
		newHash = sha1.New
	case "sha256":
		newHash = sha256.New
	default:
		return fmt.Errorf("object format %q is not supported", gt.format)
	}
	dirOK := map[string]bool{".": true}
	var bad []string
	for _, e := range gt.entries {
		if why := checkEntry(root, dirOK, newHash, e); why != "" {
			bad = append(bad, quotePath(e.path)+" ("+why+")")
		}
	}
	if len(bad) > 0 {
		return &TreeMismatchError{Paths: bad}
	}
	return nil
}

// checkEntry returns why the worktree path differs from e, or "".
func checkEntry(root *os.Root, dirOK map[string]bool, newHash func() hash.Hash, e treeEntry) string {
	for d := path.Dir(e.path); !dirOK[d]; d = path.Dir(d) {
		st, err := root.Lstat(d)
		if err != nil || !st.IsDir() {
			return d + " is no longer a directory"
		}
		dirOK[d] = true
	}
	st, err := root.Lstat(e.path)
	if err != nil {
		return "missing"
	}
	h := newHash()
	switch e.mode {
	case "100644", "100755":
		if !st.Mode().IsRegular() {
			return "no longer a regular file"
		}
		if (e.mode == "100755") != (st.Mode().Perm()&0o100 != 0) {
			return "executable bit changed"
		}
		f, err := root.OpenFile(e.path, os.O_RDONLY|noFollow, 0)
		if err != nil {
			return err.Error()
		}
		defer f.Close()
		fst, err := f.Stat()
		if err != nil || !fst.Mode().IsRegular() {
			return "no longer a regular file"
		}
		if fst.Size() != e.size {
			return "content changed" // and never hash a huge file the gate left
		}
		fmt.Fprintf(h, "blob %d\x00", fst.Size())
		n, err := io.Copy(h, io.LimitReader(f, fst.Size()+1))
		if err != nil || n != fst.Size() {
			return "changed while reading"
		}
	case "120000":
		if st.Mode()&fs.ModeSymlink == 0 {
			return "no longer a symlink"
		}
		target, err := root.Readlink(e.path)
		if err != nil {
			return err.Error()
		}
		fmt.Fprintf(h, "blob %d\x00%s", len(target), target)
	default:
		return "unsupported mode " + e.mode
	}
	if hex.EncodeToString(h.Sum(nil)) != e.oid {
		return "content changed"
	}
	return ""
}

// readHead reads dir/.git/HEAD: .git must be a real directory and HEAD a
// small regular file.
func readHead(dir string) (string, error) {
	gd := filepath.Join(dir, ".git")
	st, err := os.Lstat(gd)
	if err != nil || !st.IsDir() {
		return "", errors.New("the gate clone's .git is no longer a directory")
	}
	hp := filepath.Join(gd, "HEAD")
	st, err = os.Lstat(hp)
	if err != nil || !st.Mode().IsRegular() || st.Size() > 4096 {
		return "", errors.New("the gate clone's .git/HEAD is no longer a small regular file")
	}
	data, err := os.ReadFile(hp)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(data)), nil
}

// sandboxExitFailed is sandbox-supervisor's status when it could not
// create the sandbox.
const sandboxExitFailed = sandbox.ExitSandboxFailed

func idString(uid, gid int) string { return strconv.Itoa(uid) + ":" + strconv.Itoa(gid) }
