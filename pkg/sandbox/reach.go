package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// OutOfReach checks that the sandbox cannot change path: a policy file
// the proxy hot-reloads, a hosts file it resolves with, or an events file
// it appends to. An agent that could edit, or rename a file over, any of
// them could widen its own egress or forge its audit trail.
//
// The path (which need not exist yet, for an events file) must lie
// outside the working directory and every read-write path the sandbox
// gets from the host, and neither it nor its directory may be writable by
// the sandbox identity through ordinary permissions (owned by it, or
// group- or world-writable where that group or "other" includes it).
// private lists read-write paths that are fresh filesystems inside the
// sandbox (/tmp, /dev/shm): the host's copies are invisible there.
func OutOfReach(label, path string, uid, gid uint32, workdir string, readWrite, private []string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("%s %s: %w", label, path, err)
	}
	if real, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
		abs = filepath.Join(real, filepath.Base(abs))
	}
	roots := []string{workdir}
	for _, p := range readWrite {
		isPrivate := false
		for _, q := range private {
			if filepath.Clean(p) == q {
				isPrivate = true
			}
		}
		if !isPrivate {
			roots = append(roots, p)
		}
	}
	for _, r := range roots {
		if r != "" && under(abs, r) {
			return fmt.Errorf("%s %s lies in %s, which the sandbox can write: keep it outside the sandbox's read-write paths", label, path, r)
		}
	}
	for _, p := range []string{abs, filepath.Dir(abs)} {
		fi, err := os.Stat(p)
		if os.IsNotExist(err) && p == abs {
			continue // an events file that does not exist yet
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", label, path, err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			continue
		}
		mode := fi.Mode().Perm()
		switch {
		case st.Uid == uid:
			return fmt.Errorf("%s %s: %s is owned by the sandbox user (uid %d)", label, path, p, uid)
		case st.Gid == gid && mode&0o020 != 0:
			return fmt.Errorf("%s %s: %s is writable by the sandbox group (gid %d)", label, path, p, gid)
		case mode&0o002 != 0 && !(fi.IsDir() && fi.Mode()&os.ModeSticky != 0 && p != abs):
			return fmt.Errorf("%s %s: %s is world-writable", label, path, p)
		}
	}
	return nil
}
