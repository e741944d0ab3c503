//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// CheckWorkdirEntry checks, before anything is created, that the sandbox
// identity can enter the working directory: the command starts there, so
// a directory it cannot traverse (root's home is 0700) would end the run
// in an exec "permission denied" (126) that names neither the directory
// nor the fix. Only the mode bits are read (the identity has no
// supplementary groups); an ACL that grants more is not consulted.
// Directories at or under one of the sandbox's fresh filesystems (the
// spec's non-bind mounts: /tmp, /run, ...) are the sandbox's own, made
// 0755 by the init, so a working directory under the host's /tmp is
// reached whatever the host's modes on the way; the working directory
// itself is always the host's.
func CheckWorkdirEntry(workdir string, uid, gid uint32, mounts []specs.Mount) error {
	dir := filepath.Clean(workdir)
	for p := dir; ; p = filepath.Dir(p) {
		if p != dir && coveredByMount(mounts, p) {
			return nil
		}
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("working directory %s: %w", workdir, err)
		}
		if !canSearch(fi, uid, gid) {
			st := fi.Sys().(*syscall.Stat_t)
			why := fmt.Sprintf("%s is mode %04o, owned by uid %d gid %d", p, fi.Mode().Perm(), st.Uid, st.Gid)
			return fmt.Errorf("working directory %s: the sandbox identity (uid %d, gid %d) cannot enter it (%s); "+
				"pass --workdir DIR with a directory that uid %d owns or can traverse, e.g. "+
				"`install -d -o %d -g %d /var/tmp/palisade-work` then --workdir /var/tmp/palisade-work",
				workdir, uid, gid, why, uid, uid, gid)
		}
		if p == "/" {
			return nil
		}
	}
}

func canSearch(fi os.FileInfo, uid, gid uint32) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return true
	}
	m := uint32(fi.Mode().Perm())
	switch {
	case st.Uid == uid:
		return m&0o100 != 0
	case st.Gid == gid:
		return m&0o010 != 0
	}
	return m&0o001 != 0
}

// TestScratch is the directory, under the working directory, that the
// bounded-tmpfs profile points TMPDIR at.
const TestScratch = "test-scratch"

// OpenWorkdir opens the working directory for the supervisor without
// following any symbolic link (openat2 RESOLVE_NO_SYMLINKS). The path was
// resolved once, by the command line (symbolic links of root's only:
// fsutil.ResolveTrusted); from here on the directory is held by this
// descriptor: test-scratch is created through it, and the init, which
// must open the directory in its own mount namespace, checks that what
// it opens (again without following a link) is this directory before it
// binds it and grants it to Landlock. An agent that replaced a component
// with a symbolic link after an earlier run (rm -rf repo; ln -s /var repo)
// is refused, naming the link, instead of being handed /var read-write.
func OpenWorkdir(path string) (int, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err == nil {
		return fd, nil
	}
	if errors.Is(err, unix.ELOOP) {
		if link, why := firstSymlink(path); link != "" {
			return -1, fmt.Errorf("working directory %s: %s is %s; a working directory is never reached through a symbolic link (the sandbox would get whatever it points at): give the directory's real path", path, link, why)
		}
	}
	return -1, fmt.Errorf("working directory %s: %w", path, err)
}

// firstSymlink names the first component of path that is a symbolic
// link, with its owner and target, for an error.
func firstSymlink(path string) (string, string) {
	p := "/"
	for _, c := range strings.Split(strings.TrimPrefix(filepath.Clean(path), "/"), "/") {
		p = filepath.Join(p, c)
		var st unix.Stat_t
		if unix.Lstat(p, &st) != nil {
			return "", ""
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			target, _ := os.Readlink(p)
			return p, fmt.Sprintf("a symbolic link owned by uid %d (to %s)", st.Uid, strconv.Quote(target))
		}
	}
	return "", ""
}

// sameDir reports whether the descriptors a and b are the same directory.
func sameDir(a, b int) bool {
	var sa, sb unix.Stat_t
	return unix.Fstat(a, &sa) == nil && unix.Fstat(b, &sb) == nil && sa.Dev == sb.Dev && sa.Ino == sb.Ino &&
		sa.Mode&unix.S_IFMT == unix.S_IFDIR
}

// MakeTestScratch creates test-scratch in the working directory wd (a
// descriptor from OpenWorkdir; workdir names it in messages) for the
// bounded-tmpfs profile, mode 0700 and owned by the sandbox identity. The
// working directory is the agent's: a symlink or other file it planted
// under that name is never followed (mkdirat does not follow a last
// component, and the directory is re-opened with openat2 RESOLVE_BENEATH
// and RESOLVE_NO_SYMLINKS before its owner is changed through the
// descriptor). An existing directory is left as it is; anything else
// there is an error naming the path.
func MakeTestScratch(wd int, workdir string, uid, gid uint32) error {
	path := filepath.Join(workdir, TestScratch)
	created := true
	if err := unix.Mkdirat(wd, TestScratch, 0o700); err != nil {
		if !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("bounded-tmpfs: create TMPDIR %s: %w", path, err)
		}
		created = false
	}
	fd, err := unix.Openat2(wd, TestScratch, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	switch {
	case errors.Is(err, unix.ELOOP):
		return fmt.Errorf("bounded-tmpfs: TMPDIR %s is a symlink; it must be a directory inside the working directory (remove it)", path)
	case errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("bounded-tmpfs: TMPDIR %s exists and is not a directory (remove it)", path)
	case err != nil:
		return fmt.Errorf("bounded-tmpfs: open TMPDIR %s: %w", path, err)
	}
	defer unix.Close(fd)
	if created {
		if err := unix.Fchown(fd, int(uid), int(gid)); err != nil {
			return fmt.Errorf("bounded-tmpfs: chown TMPDIR %s: %w", path, err)
		}
	}
	return nil
}
