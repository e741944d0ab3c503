package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/palisade-sandbox/palisade/pkg/fsutil"
)

// HomeDirName is the sandbox's own HOME inside its state directory
// (without --home): created with the sandbox, owned by its identity,
// bound at DefaultHome, kept with the state (--keep, run --detach) and
// removed with it (teardown, delete, gc).
const HomeDirName = "home"

// SandboxHome is HOME inside the sandbox for --home home ("" for none):
// that directory, or DefaultHome.
func SandboxHome(home string) string {
	if home == "" {
		return DefaultHome
	}
	return filepath.Clean(home)
}

// PrivateReadWrite are read-write paths that are fresh filesystems or
// device nodes inside every sandbox: the host's copies are invisible
// there, so nothing an agent writes at those paths reaches the host.
var PrivateReadWrite = []string{"/tmp", "/dev/shm", "/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/pts"}

// CheckHome checks --home DIR and returns it cleaned (the sandbox's
// HOME) and resolved (the host directory to create and bind, with no
// symlink on it now). Root creates the directory (or accepts it) for the
// sandbox identity and binds it into the sandbox, so the agent must not
// be able to change what the name leads to: DIR may be the working
// directory itself (the old default), but not lie strictly inside it or
// inside a read_write path (private lists those that are fresh
// filesystems in the sandbox), as named or as resolved now; a symlink on
// it must be root's (fsutil.ResolveTrusted); and no directory a
// component of DIR is looked up in may be writable by the sandbox
// identity (owned by uid, group-writable with gid, or world-writable
// without the sticky bit). The directory holding DIR must exist.
func CheckHome(home, workdir string, readWrite, private []string, uid, gid uint32) (clean, resolved string, err error) {
	if !filepath.IsAbs(home) {
		return "", "", fmt.Errorf("--home %q: must be an absolute path", home)
	}
	clean = filepath.Clean(home)
	if clean == "/" {
		return "", "", errors.New("--home /: must name a directory other than /")
	}
	if clean == filepath.Clean(workdir) {
		return clean, clean, nil
	}
	if label, ok := newWritableRoots(workdir, readWrite, private).inside(clean); ok {
		return "", "", fmt.Errorf("--home %s lies inside %s, which the sandbox can write: the agent could replace it with a symlink before root creates or binds it; choose a directory outside every read-write path", home, label)
	}
	if resolved, err = fsutil.ResolveTrusted(clean); err != nil {
		return "", "", fmt.Errorf("--home %s: %w", home, err)
	}
	for _, cand := range resolvedPrefixes(clean) {
		dir := filepath.Dir(cand)
		fi, err := os.Stat(dir)
		if errors.Is(err, os.ErrNotExist) {
			return "", "", fmt.Errorf("--home %s: its directory %s does not exist; create it first (owned by root, e.g. `install -d -m 0755 %s`)", home, dir, dir)
		}
		if err != nil {
			return "", "", fmt.Errorf("--home %s: %w", home, err)
		}
		if why := writableBy(fi, uid, gid); why != "" {
			return "", "", fmt.Errorf("--home %s: %s is %s, so the agent could replace what %s names; choose a directory whose parents only root can change", home, dir, why, cand)
		}
	}
	return clean, resolved, nil
}

// writableBy says why uid:gid could rename or remove entries of the
// directory fi ("" when it cannot): it owns it, or its group or everyone
// may write it and it is not sticky (in a sticky directory only an
// entry's owner may rename or remove it).
func writableBy(fi os.FileInfo, uid, gid uint32) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	mode := fi.Mode()
	sticky := mode&os.ModeSticky != 0
	switch {
	case st.Uid == uid:
		return fmt.Sprintf("owned by the sandbox identity (uid %d)", uid)
	case st.Gid == gid && mode&0o020 != 0 && !sticky:
		return fmt.Sprintf("writable by the sandbox group (gid %d)", gid)
	case mode&0o002 != 0 && !sticky:
		return "world-writable"
	}
	return ""
}
