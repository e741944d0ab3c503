//go:build unix

package fsutil

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ForeignSymlinkError is a symbolic link on a path root uses that belongs
// to someone other than root or this process's effective user: its owner
// could re-point it at any time (an agent that replaced its working
// directory with a link to /var, say).
type ForeignSymlinkError struct {
	Path   string // the link
	UID    uint32 // its owner
	Target string // where it points now
}

func (e *ForeignSymlinkError) Error() string {
	return fmt.Sprintf("%s is a symbolic link owned by uid %d (to %s), which that user could re-point; give the path without it",
		e.Path, e.UID, strconv.Quote(e.Target))
}

// maxSymlinkHops bounds ResolveTrusted as the kernel bounds a lookup
// (MAXSYMLINKS).
const maxSymlinkHops = 40

// ResolveTrusted returns the absolute path with every symbolic link on it
// resolved, like filepath.EvalSymlinks, but refuses (with a
// *ForeignSymlinkError) a link owned by anyone but root or this process's
// effective uid. Links of root's own (/var/run -> /run, a deployment's
// /srv -> /data/srv) are followed. A missing component ends the walk: the
// rest is appended as given (nothing missing can be a link). The result
// holds no symbolic link at the moment it is returned; callers that
// create or open things in it still open it without following links
// (openat2 RESOLVE_NO_SYMLINKS, O_NOFOLLOW), so a link planted later
// fails instead of being followed.
func ResolveTrusted(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	euid := uint32(os.Geteuid())
	rest := strings.Split(strings.TrimPrefix(abs, "/"), "/")
	cur := "/"
	for hops := 0; len(rest) > 0; {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, c)
		fi, err := os.Lstat(next)
		if errors.Is(err, fs.ErrNotExist) {
			return filepath.Join(append([]string{next}, rest...)...), nil
		}
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && st.Uid != euid {
			target, _ := os.Readlink(next)
			return "", &ForeignSymlinkError{Path: next, UID: st.Uid, Target: target}
		}
		if hops++; hops > maxSymlinkHops {
			return "", &fs.PathError{Op: "resolve", Path: path, Err: syscall.ELOOP}
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			cur = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return cur, nil
}

// OthersCanReplace returns why someone other than root or this process's
// effective user could rename, remove or replace entries of the
// directory dir (and so swap what a path through it names): dir owned by
// another user, or writable by a group other than this process's
// effective group, or by others, without the sticky bit (in a sticky
// directory only an entry's owner may rename it). "" when nobody else
// can.
func OthersCanReplace(dir string) (string, error) {
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", nil
	}
	euid, egid := uint32(os.Geteuid()), uint32(os.Getegid())
	mode := fi.Mode()
	sticky := mode&fs.ModeSticky != 0
	switch {
	case !fi.IsDir():
		return "not a directory", nil
	case st.Uid != 0 && st.Uid != euid:
		return fmt.Sprintf("owned by uid %d", st.Uid), nil
	case mode&0o002 != 0 && !sticky:
		return fmt.Sprintf("writable by others (mode %04o)", st.Mode&0o7777), nil
	case mode&0o020 != 0 && st.Gid != egid && !sticky:
		return fmt.Sprintf("writable by group %d (mode %04o)", st.Gid, st.Mode&0o7777), nil
	}
	return "", nil
}

// CheckDirsTrusted checks every directory from / down to dir (an
// absolute path without symbolic links, as ResolveTrusted returns it)
// with OthersCanReplace: no one but root and this user can then swap
// what a name below dir refers to. Missing directories end the check.
func CheckDirsTrusted(dir string) error {
	dir = filepath.Clean(dir)
	for p := "/"; ; {
		why, err := OthersCanReplace(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if why != "" {
			return fmt.Errorf("%s is %s: another user could replace what lies below it", p, why)
		}
		if p == dir {
			return nil
		}
		rel, _ := filepath.Rel(p, dir)
		p = filepath.Join(p, strings.SplitN(rel, string(filepath.Separator), 2)[0])
	}
}
