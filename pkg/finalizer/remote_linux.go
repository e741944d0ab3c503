//go:build linux

package finalizer

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/fsutil"
)

// checkLocalRemote checks a local canonical remote (an absolute path the
// operator named with --remote, equal to the evidence's remote_url) and
// returns its path with every symbolic link resolved. Root's
// receive-pack writes into that repository, so nothing an agent could
// have written may steer it: an agent (task 1) can plant a bare
// repository in its workspace whose receive.denyCurrentBranch=updateInstead
// and a linked worktree entry make a push check the pushed tree out into
// any directory, and once that workspace is preserved (chown -R root) git's
// ownership check passes. So a local remote must
//
//   - be reached through symbolic links of root's (or this user's) only;
//   - lie outside this workspace and outside every task workspace (no
//     directory from it up to / holds mac-evidence.json,
//     finalizer-progress.json or finalizer-recovery.json);
//   - hang below directories only root (or this user) can change;
//   - be a bare repository (HEAD, objects/, refs/) with no worktrees/,
//     commondir or alternates, no symbolic link, FIFO, socket or device,
//     and no directory another user could change.
//
// The push itself still runs receive-pack with denyCurrentBranch=refuse
// and denyDeleteCurrent=refuse (localRemoteConfig).
func checkLocalRemote(ctx context.Context, p, ws string) (string, error) {
	real, err := fsutil.ResolveTrusted(p)
	if err != nil {
		return "", err
	}
	if realWS, err := filepath.EvalSymlinks(ws); err == nil && (under(real, realWS) || under(realWS, real)) {
		return "", fmt.Errorf("a local remote must lie outside the workspace (it resolves to %s)", quotePath(real))
	}
	for d := real; ; d = filepath.Dir(d) {
		for _, f := range []string{EvidenceFile, ProgressFile, RecordFile} {
			if _, err := os.Lstat(filepath.Join(d, f)); err == nil {
				return "", fmt.Errorf("it lies in %s, a task workspace (it holds %s): an agent could have planted the repository there", quotePath(d), f)
			}
		}
		if d == "/" {
			break
		}
	}
	if err := fsutil.CheckDirsTrusted(real); err != nil {
		return "", err
	}
	d, err := openWorkspaceDir(real)
	if err != nil {
		return "", fmt.Errorf("not a local repository directory: %w", err)
	}
	defer d.close()
	for _, want := range []struct {
		name string
		dir  bool
	}{{"HEAD", false}, {"objects", true}, {"refs", true}} {
		st, err := d.lstat(want.name)
		if err != nil || isDir(st) != want.dir || (!want.dir && !isReg(st)) {
			return "", fmt.Errorf("%s is not a bare repository (no %s); name the bare canonical repository", quotePath(real), want.name)
		}
	}
	refusals, err := scanTree(ctx, d, localRemoteRule)
	if err != nil {
		return "", err
	}
	if len(refusals) > 0 {
		return "", fmt.Errorf("%s", strings.Join(refusals, "; "))
	}
	return real, nil
}

// localRemoteRule refuses, in a local remote, what could make root's
// receive-pack or upload-pack write or read outside it, check a tree out
// somewhere, or block, and any directory another user could change.
func localRemoteRule(rel string, st unix.Stat_t) (string, bool) {
	switch rel {
	case "commondir":
		return "commondir points git at another repository", false
	case "worktrees":
		return "linked worktrees: a push could check the pushed tree out into the directories they name", false
	case "objects/info/alternates", "objects/info/http-alternates":
		return "alternates borrow objects from another repository", false
	}
	if isDir(st) {
		return othersCanChange(st), true
	}
	return fileKind(st), false
}

// under reports whether p is dir or lies below it (both clean, absolute).
func under(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+string(filepath.Separator)) || dir == "/"
}
