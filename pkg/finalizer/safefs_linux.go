//go:build linux

package finalizer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// safeDir is a directory of the workspace opened without following a
// symlink on the way. Everything root reads from the workspace goes
// through one: every component is opened with O_NOFOLLOW relative to its
// parent's descriptor, files with O_NOFOLLOW|O_NONBLOCK (a FIFO neither
// blocks nor is read), and only regular files with one link and a bounded
// size are read.
type safeDir struct {
	fd   int
	path string // for messages only; never opened by name
}

// openWorkspaceDir opens the operator-named workspace directory. The path
// itself is the operator's; what lies below it is the agent's.
func openWorkspaceDir(path string) (*safeDir, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("workspace %s: not a directory: %w", path, err)
	}
	return &safeDir{fd: fd, path: path}, nil
}

func (d *safeDir) close() {
	if d != nil && d.fd >= 0 {
		unix.Close(d.fd)
		d.fd = -1
	}
}

func (d *safeDir) join(name string) string { return filepath.Join(d.path, name) }

// procPath names d's descriptor for a child to enter before exec (the
// descriptor is still open then; it closes on exec).
func (d *safeDir) procPath() string { return fmt.Sprintf("/proc/self/fd/%d", d.fd) }

// openDir opens the relative directory rel (one or more components) below
// d without following any symlink.
func (d *safeDir) openDir(rel string) (*safeDir, error) {
	fd, err := unix.Dup(d.fd)
	if err != nil {
		return nil, err
	}
	unix.CloseOnExec(fd)
	cur := &safeDir{fd: fd, path: d.path}
	for _, c := range strings.Split(rel, "/") {
		if c == "" || c == "." {
			continue
		}
		p := filepath.Join(cur.path, c)
		nfd, err := unix.Openat(cur.fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			defer cur.close()
			switch {
			case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR):
				// O_NOFOLLOW|O_DIRECTORY on a symlink fails with ENOTDIR.
				what := "not a directory"
				var st unix.Stat_t
				if unix.Fstatat(cur.fd, c, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && fileKind(st) != "" {
					what = fileKind(st) + ", not a directory"
				}
				return nil, &SpecialFileError{Path: p, What: what}
			case errors.Is(err, unix.ENOENT):
				return nil, fmt.Errorf("%s: %w", quotePath(p), os.ErrNotExist)
			}
			return nil, fmt.Errorf("%s: %w", quotePath(p), err)
		}
		cur.close()
		cur = &safeDir{fd: nfd, path: p}
	}
	return cur, nil
}

// lstat stats name in d without following it.
func (d *safeDir) lstat(name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	return st, err
}

// stat stats d itself.
func (d *safeDir) stat() (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstat(d.fd, &st)
	return st, err
}

// names lists the entries of d.
func (d *safeDir) names() ([]string, error) {
	fd, err := unix.Openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", quotePath(d.path), err)
	}
	f := os.NewFile(uintptr(fd), d.path)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", quotePath(d.path), err)
	}
	return names, nil
}

// openRegular opens name in d for reading: never through a symlink, never
// blocking on a FIFO, and only a regular file with a single link of at
// most max bytes that is not sparse. The descriptor is checked, not the
// name, so what is read is what was checked.
func (d *safeDir) openRegular(name string, max int64) (*os.File, int64, error) {
	return d.open(name, max, false)
}

// openObject is openRegular for a loose object, a pack or a pack index,
// which may have other names (see hardLinkedObjectOK): they are only read,
// into the private mirror, where git fsck verifies every object.
func (d *safeDir) openObject(name string, max int64) (*os.File, int64, error) {
	return d.open(name, max, hardLinkedObjectOK())
}

func (d *safeDir) open(name string, max int64, linksOK bool) (*os.File, int64, error) {
	p := d.join(name)
	fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, 0, &SpecialFileError{Path: p, What: "a symbolic link"}
		}
		if errors.Is(err, unix.ENOENT) {
			return nil, 0, fmt.Errorf("%s: %w", quotePath(p), os.ErrNotExist)
		}
		return nil, 0, fmt.Errorf("%s: %w", quotePath(p), err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, 0, fmt.Errorf("%s: %w", quotePath(p), err)
	}
	if what := fileKind(st); what != "" {
		unix.Close(fd)
		return nil, 0, &SpecialFileError{Path: p, What: what}
	}
	if st.Nlink != 1 && !linksOK {
		unix.Close(fd)
		return nil, 0, &SpecialFileError{Path: p, What: fmt.Sprintf("a hard link (%d names share it; one may be outside the workspace)", st.Nlink)}
	}
	if st.Size > max {
		unix.Close(fd)
		return nil, 0, &SpecialFileError{Path: p, What: fmt.Sprintf("%d bytes, more than the %d allowed", st.Size, max)}
	}
	if why := sparse(st); why != "" {
		unix.Close(fd)
		return nil, 0, &SpecialFileError{Path: p, What: why}
	}
	// Reads block from here on; a regular file never blocks for long.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, 0, err
	}
	return os.NewFile(uintptr(fd), p), st.Size, nil
}

// readFile reads a small regular file (see openRegular).
func (d *safeDir) readFile(name string, max int64) ([]byte, error) {
	f, _, err := d.openRegular(name, max)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", quotePath(f.Name()), err)
	}
	if int64(len(data)) > max {
		return nil, &SpecialFileError{Path: f.Name(), What: fmt.Sprintf("grew beyond the %d bytes allowed", max)}
	}
	return data, nil
}

// copyFile copies the regular file name in d to dst (created exclusively,
// mode 0600) and returns the bytes copied, at most max.
func (d *safeDir) copyFile(ctx context.Context, name, dst string, max int64) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	f, _, err := d.openRegular(name, max)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return copyOpened(f, dst, 0o600, max)
}

// copyOpened copies the checked file f to dst (created exclusively, never
// through a symlink, with perm) and returns the bytes copied, at most max.
func copyOpened(f *os.File, dst string, perm os.FileMode, max int64) (int64, error) {
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, perm)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, io.LimitReader(f, max+1))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, fmt.Errorf("copying %s: %w", quotePath(f.Name()), err)
	}
	if n > max {
		return n, &SpecialFileError{Path: f.Name(), What: fmt.Sprintf("grew beyond the %d bytes allowed", max)}
	}
	return n, nil
}

// sameDir reports whether rel below d is still (without following
// symlinks) the directory other was opened as.
func (d *safeDir) sameDir(rel string, other *safeDir) bool {
	cur, err := d.openDir(rel)
	if err != nil {
		return false
	}
	defer cur.close()
	a, err1 := cur.stat()
	b, err2 := other.stat()
	return err1 == nil && err2 == nil && a.Dev == b.Dev && a.Ino == b.Ino
}

// fileKind names a file type root never reads, or "" for a regular file.
func fileKind(st unix.Stat_t) string {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return ""
	case unix.S_IFLNK:
		return "a symbolic link"
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "a device"
	case unix.S_IFDIR:
		return "a directory"
	}
	return "not a regular file"
}

func isDir(st unix.Stat_t) bool { return st.Mode&unix.S_IFMT == unix.S_IFDIR }
func isReg(st unix.Stat_t) bool { return st.Mode&unix.S_IFMT == unix.S_IFREG }
func isLink(st unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFLNK
}
func nlink(st unix.Stat_t) uint64 { return uint64(st.Nlink) }

// Sparse files: a file whose size exceeds twice its allocated blocks by
// more than sparseSlack is refused by name (a 3 GiB pack that occupies
// 248 KiB made inspect write 3 GiB of zeros into $TMPDIR). Real objects,
// packs and indexes are written, not seeked over, so they occupy at least
// their size (within a block; compressing filesystems store git's
// already-compressed objects at about their size); the slack covers
// small files kept inside the inode or a metadata block (st_blocks 0).
// So what root copies from .git is at most twice the disk space it
// occupies in the workspace, plus the slack per file.
const sparseSlack = 64 << 10

// sparse says why st is a sparse file root refuses to copy, or "".
func sparse(st unix.Stat_t) string {
	allocated := st.Blocks * 512
	if st.Size > 2*allocated+sparseSlack {
		return fmt.Sprintf("a sparse file (%d bytes, %d allocated on disk)", st.Size, allocated)
	}
	return ""
}

// hardLinkedObjectOK reports whether a regular file under .git/objects may
// have more than one name: only when the kernel's fs.protected_hardlinks
// is 1, so that nobody can link a file they could not read and write
// themselves (with it off, an agent could link a root-only file into its
// objects). Such files are only read, into the private mirror, and git
// fsck rehashes every object there: another name can give the mirror only
// bytes the agent could have written itself, and a link changed while it
// is copied fails the check. git clone of a local repository hard-links
// .git/objects by default; other hard links stay refused.
var hardLinkedObjectOK = sync.OnceValue(func() bool {
	b, err := os.ReadFile("/proc/sys/fs/protected_hardlinks")
	return err == nil && strings.TrimSpace(string(b)) == "1"
})

func ownerUID(st unix.Stat_t) int { return int(st.Uid) }

// Bounds of a workspace scan: it must finish, and its refusal list must
// stay readable.
const (
	maxScanEntries  = 2_000_000
	maxScanDepth    = 128
	maxScanRefusals = 20
)

// scanRule judges one entry (rel is relative to the scanned root, with
// slashes): a non-empty refusal, and whether to descend into a directory.
type scanRule func(rel string, st unix.Stat_t) (refusal string, descend bool)

type scanner struct {
	ctx      context.Context
	rule     scanRule
	refusals []string
	entries  int
	err      error
}

// scanTree walks d without following symlinks and returns a refusal, each
// naming its path, for every entry rule rejects.
func scanTree(ctx context.Context, d *safeDir, rule scanRule) ([]string, error) {
	s := &scanner{ctx: ctx, rule: rule}
	s.walk(d, "", 0)
	return s.refusals, s.err
}

func (s *scanner) refuse(path, what string) {
	if len(s.refusals) < maxScanRefusals {
		s.refusals = append(s.refusals, fmt.Sprintf("refusing %s: %s", quotePath(path), what))
	} else if len(s.refusals) == maxScanRefusals {
		s.refusals = append(s.refusals, "refusing more special files (list truncated)")
	}
}

func (s *scanner) walk(d *safeDir, rel string, depth int) {
	if s.err != nil || len(s.refusals) > maxScanRefusals {
		return
	}
	if depth > maxScanDepth {
		s.refuse(d.path, fmt.Sprintf("nested deeper than %d directories", maxScanDepth))
		return
	}
	names, err := d.names()
	if err != nil {
		s.err = err
		return
	}
	for _, name := range names {
		s.entries++
		if s.entries%1024 == 0 {
			if err := s.ctx.Err(); err != nil {
				s.err = err
				return
			}
		}
		if s.entries > maxScanEntries {
			s.refuse(d.path, fmt.Sprintf("more than %d entries to check", maxScanEntries))
			s.err = nil
			return
		}
		r := name
		if rel != "" {
			r = rel + "/" + name
		}
		st, err := d.lstat(name)
		if err != nil {
			s.err = fmt.Errorf("%s: %w", quotePath(d.join(name)), err)
			return
		}
		why, descend := s.rule(r, st)
		if why != "" {
			s.refuse(d.join(name), why)
			continue
		}
		if !descend || !isDir(st) {
			continue
		}
		sub, err := d.openDir(name)
		if err != nil {
			var sfe *SpecialFileError
			if errors.As(err, &sfe) {
				s.refuse(sfe.Path, sfe.What+" (it changed while being checked)")
				continue
			}
			s.err = err
			return
		}
		s.walk(sub, r, depth+1)
		sub.close()
	}
}

// gitDirRule refuses what would make git, run as root, read or write
// outside the repository, block, or consult another repository:
// symlinks, FIFOs, sockets, devices, hard links (outside objects/: see
// hardLinkedObjectOK), commondir, alternates and linked worktrees, and
// sparse files (see sparse).
func gitDirRule(rel string, st unix.Stat_t) (string, bool) {
	switch rel {
	case "commondir":
		return "commondir points git at another repository", false
	case "worktrees":
		return "linked worktrees: their gitdir files point outside the repository", false
	case "objects/info/alternates", "objects/info/http-alternates":
		return "alternates borrow objects from another repository", false
	}
	if isDir(st) {
		return othersCanChange(st), true
	}
	if what := fileKind(st); what != "" {
		return what, false
	}
	if why := sparse(st); why != "" {
		return why, false
	}
	if nlink(st) != 1 {
		if strings.HasPrefix(rel, "objects/") {
			if hardLinkedObjectOK() {
				return "", false
			}
			return fmt.Sprintf("a hard link (%d names share it) under objects/, and fs.protected_hardlinks is not 1 on this host, so its other name could be a file the agent could not read", nlink(st)), false
		}
		return fmt.Sprintf("a hard link (%d names share it; one may be outside the workspace)", nlink(st)), false
	}
	return "", false
}

// othersCanChange refuses a directory that someone other than this user
// could still change: another owner, or write permission for the group
// or others (group write is fine for this user's own group, as a umask
// of 002 leaves it). A live agent process (the workspace is handed to root while
// the agent may still run) could otherwise rename entries in it while
// root reads the tree, e.g. exchange a checked regular file with a
// symlink to a root-only file between git's lstat and its open, so that
// root hashes and commits that file.
func othersCanChange(st unix.Stat_t) string {
	euid := os.Geteuid()
	switch {
	case int(st.Uid) != euid:
		return fmt.Sprintf("a directory owned by uid %d, not by this user (uid %d): its owner could change it while root reads it", st.Uid, euid)
	case st.Mode&0o002 != 0:
		return fmt.Sprintf("a directory writable by others (mode %04o): they could change it while root reads it", st.Mode&0o7777)
	case st.Mode&0o020 != 0 && int(st.Gid) != os.Getegid():
		return fmt.Sprintf("a directory writable by group %d (mode %04o), not this user's group: its members could change it while root reads it", st.Gid, st.Mode&0o7777)
	}
	return ""
}

// workTreeRule refuses, in the working tree git will read as root, what
// could block it (FIFOs, sockets, devices), hand it another file's
// content (hard links), or another repository (nested .git); symlinks are
// recorded as links, never followed, except where git would read them.
func workTreeRule(rel string, st unix.Stat_t) (string, bool) {
	if rel == ".git" {
		return "", false // scanned on its own with gitDirRule
	}
	base := rel[strings.LastIndexByte(rel, '/')+1:]
	if base == ".git" {
		return "a nested repository or gitfile (.git) below the repository root", false
	}
	switch {
	case isDir(st):
		return othersCanChange(st), true
	case isLink(st):
		switch base {
		case ".gitignore", ".gitattributes", ".gitmodules", ".mailmap":
			return "a symbolic link git would read", false
		}
		return "", false
	}
	if what := fileKind(st); what != "" {
		return what, false
	}
	if nlink(st) != 1 {
		return fmt.Sprintf("a hard link (%d names share it; one may be outside the workspace)", nlink(st)), false
	}
	return "", false
}

// exists reports whether name is present in d (of any type).
func (d *safeDir) exists(name string) bool {
	_, err := d.lstat(name)
	return err == nil
}

// ownedBy reports whether d belongs to uid.
func (d *safeDir) ownedBy(uid int) bool {
	st, err := d.stat()
	return err == nil && ownerUID(st) == uid
}

// changeableByOthers returns why d itself could be changed by someone
// other than this user (see othersCanChange), or "".
func (d *safeDir) changeableByOthers() string {
	st, err := d.stat()
	if err != nil {
		return err.Error()
	}
	return othersCanChange(st)
}

// scanGitDir checks a repository's .git directory with gitDirRule.
func scanGitDir(ctx context.Context, git *safeDir) ([]string, error) {
	return scanTree(ctx, git, gitDirRule)
}

// scanWorkTree checks a repository's working tree with workTreeRule.
func scanWorkTree(ctx context.Context, repo *safeDir) ([]string, error) {
	return scanTree(ctx, repo, workTreeRule)
}

// snapshotPath copies rel (a clean slash-separated path below d) to the
// same relative path below dst, as git add would record it, without
// following anything: a regular file (mode 0700 when its owner may
// execute it, else 0600; at most max bytes), a symlink (recreated with
// its target), or nothing when rel is absent, a directory, or below a
// symlink or a file (git records a removal). Any other type, a hard link
// or an oversized file is refused. It returns the bytes copied.
//
// git add then reads the snapshot, never the agent's working tree: the
// tree is reached through the descriptors inspection checked, so a
// repository directory swapped by name after the checks is not read.
func (d *safeDir) snapshotPath(ctx context.Context, rel, dst string, max int64) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	dir, base := path.Split(rel)
	parent, err := d.openDir(strings.TrimSuffix(dir, "/"))
	if err != nil {
		var sfe *SpecialFileError
		if errors.Is(err, fs.ErrNotExist) || errors.As(err, &sfe) {
			return 0, nil // git sees no file there
		}
		return 0, err
	}
	defer parent.close()
	st, err := parent.lstat(base)
	switch {
	case errors.Is(err, unix.ENOENT):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("%s: %w", quotePath(parent.join(base)), err)
	case isDir(st):
		return 0, nil
	}
	target := filepath.Join(dst, filepath.FromSlash(rel))
	if err := mkdirNoFollow(dst, strings.TrimSuffix(dir, "/")); err != nil {
		return 0, err
	}
	if isLink(st) {
		buf := make([]byte, 4096)
		n, err := unix.Readlinkat(parent.fd, base, buf)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", quotePath(parent.join(base)), err)
		}
		if n >= len(buf) {
			return 0, &SpecialFileError{Path: parent.join(base), What: "a symbolic link with an over-long target"}
		}
		return 0, os.Symlink(string(buf[:n]), target)
	}
	f, _, err := parent.openRegular(base, max)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var fst unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &fst); err != nil {
		return 0, err
	}
	perm := os.FileMode(0o600)
	if fst.Mode&0o100 != 0 {
		perm = 0o700
	}
	return copyOpened(f, target, perm, max)
}

// mkdirNoFollow creates the directories of rel below root, refusing any
// existing component that is not a directory (a symlink the snapshot
// recorded for an earlier path is never followed).
func mkdirNoFollow(root, rel string) error {
	cur := root
	for _, c := range strings.Split(rel, "/") {
		if c == "" {
			continue
		}
		cur = filepath.Join(cur, c)
		err := os.Mkdir(cur, 0o700)
		if err == nil {
			continue
		}
		if !errors.Is(err, fs.ErrExist) {
			return err
		}
		st, err := os.Lstat(cur)
		if err != nil {
			return err
		}
		if !st.IsDir() {
			return fmt.Errorf("snapshot: %s is not a directory", quotePath(cur))
		}
	}
	return nil
}
