package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	abs, err := OutsideWritable(label, path, workdir, readWrite, private)
	if err != nil {
		return err
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

// CheckPolicyPaths refuses a policy filesystem entry (read_only or
// read_write) that lies strictly inside the working directory or inside
// another read-write path: the agent can write there, so between two runs
// it could replace the entry with a symlink, and the init (root) would
// follow it when it opens the Landlock rule and grant the symlink's
// target on the next run. The working directory or a read-write path
// itself is accepted: replacing it needs write access to its parent,
// which is checked the same way.
//
// The check is made on the paths as named and, prefix by prefix, as the
// host resolves them now (a root-owned symlink elsewhere that leads into
// the working directory counts as inside it). Because an entry inside a
// writable path is refused whatever lies there today, a symlink planted
// later changes nothing. private lists read-write paths that are fresh
// filesystems inside the sandbox (/tmp, /dev/shm): nothing an agent
// writes there survives the run.
func CheckPolicyPaths(p PolicyInfo, workdir string, private []string) error {
	w := newWritableRoots(workdir, p.ReadWrite, private)
	check := func(field, entry string) error {
		if label, ok := w.inside(entry); ok {
			return fmt.Errorf("%s %s lies inside %s, which the sandbox can write: the agent could replace it with a symlink between runs and widen its own access; name a path outside every read-write path", field, entry, label)
		}
		return nil
	}
	for i, e := range p.ReadOnly {
		if err := check(fmt.Sprintf("filesystem_policy.read_only[%d]", i), e); err != nil {
			return err
		}
	}
	for i, e := range p.ReadWrite {
		if err := check(fmt.Sprintf("filesystem_policy.read_write[%d]", i), e); err != nil {
			return err
		}
	}
	return nil
}

// writableRoots are the directories the sandbox can write that it gets
// from the host (the working directory and the read_write paths that are
// not private), each as named and as resolved now.
type writableRoots []struct{ path, label string }

func newWritableRoots(workdir string, readWrite, private []string) writableRoots {
	type root struct{ path, label string }
	roots := []root{{workdir, "the working directory " + workdir}}
	for i, rw := range readWrite {
		if !isPrivatePath(rw, private) {
			roots = append(roots, root{rw, fmt.Sprintf("filesystem_policy.read_write[%d] %s", i, rw)})
		}
	}
	var w writableRoots
	for _, r := range roots {
		if r.path == "" || !filepath.IsAbs(r.path) {
			continue
		}
		w = append(w, root{filepath.Clean(r.path), r.label})
		if real, err := filepath.EvalSymlinks(r.path); err == nil && real != filepath.Clean(r.path) {
			w = append(w, root{real, r.label})
		}
	}
	return w
}

// inside reports whether the absolute path entry lies strictly inside one
// of the roots, prefix by prefix as named and as resolved now, and names
// the root. A relative entry is not checked (validation refuses those).
func (w writableRoots) inside(entry string) (string, bool) {
	if !filepath.IsAbs(entry) {
		return "", false
	}
	for _, cand := range resolvedPrefixes(entry) {
		for _, r := range w {
			if under(cand, r.path) && filepath.Clean(cand) != r.path {
				return r.label, true
			}
		}
	}
	return "", false
}

func isPrivatePath(p string, private []string) bool {
	for _, q := range private {
		if filepath.Clean(p) == q {
			return true
		}
	}
	return false
}

// resolvedPrefixes lists every prefix of the absolute path p, each as
// its already-resolved parent joined with the next name as written (so a
// symlink shows up at its own location, not its target's), plus the
// resolved form of each prefix that exists.
func resolvedPrefixes(p string) []string {
	var out []string
	cur := "/"
	for _, name := range strings.Split(strings.Trim(filepath.Clean(p), "/"), "/") {
		if name == "" {
			continue
		}
		cand := filepath.Join(cur, name)
		out = append(out, cand)
		cur = cand
		// cur's parent is resolved already: only a symlink at cand itself
		// needs resolving (one lstat per name otherwise).
		if fi, err := os.Lstat(cand); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			if real, err := filepath.EvalSymlinks(cand); err == nil {
				out = append(out, real)
				cur = real
			}
		}
	}
	return out
}

// OutsideWritable refuses a path that lies in the working directory or in
// a read-write path the sandbox gets from the host (private lists those
// that are fresh filesystems inside it), as named and with its directory
// resolved now. It returns the absolute path it checked. OutOfReach adds
// the ownership and mode checks; a directory the supervisor creates
// itself (its state root) needs only this one.
func OutsideWritable(label, path, workdir string, readWrite, private []string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", label, path, err)
	}
	forms := []string{abs}
	if real, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
		abs = filepath.Join(real, filepath.Base(abs))
		forms = append(forms, abs)
	}
	roots := []string{workdir}
	for _, p := range readWrite {
		if !isPrivatePath(p, private) {
			roots = append(roots, p)
		}
	}
	for _, r := range roots {
		for _, f := range forms {
			if r != "" && under(f, r) {
				return "", fmt.Errorf("%s %s lies in %s, which the sandbox can write: keep it outside the sandbox's read-write paths", label, path, r)
			}
		}
	}
	return abs, nil
}
