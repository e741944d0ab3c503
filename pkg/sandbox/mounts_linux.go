//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

var mountFlags = map[string]struct {
	clear bool
	flag  uintptr
}{
	"ro": {false, unix.MS_RDONLY}, "rw": {true, unix.MS_RDONLY},
	"nosuid": {false, unix.MS_NOSUID}, "suid": {true, unix.MS_NOSUID},
	"nodev": {false, unix.MS_NODEV}, "dev": {true, unix.MS_NODEV},
	"noexec": {false, unix.MS_NOEXEC}, "exec": {true, unix.MS_NOEXEC},
	"strictatime": {false, unix.MS_STRICTATIME}, "relatime": {false, unix.MS_RELATIME},
	"noatime": {false, unix.MS_NOATIME},
	"bind":    {false, unix.MS_BIND}, "rbind": {false, unix.MS_BIND | unix.MS_REC},
}

// parseMountOptions splits OCI mount options into flags and the data string.
func parseMountOptions(opts []string) (flags uintptr, data string) {
	var d []string
	for _, o := range opts {
		if f, ok := mountFlags[o]; ok {
			if f.clear {
				flags &^= f.flag
			} else {
				flags |= f.flag
			}
			continue
		}
		d = append(d, o)
	}
	return flags, strings.Join(d, ",")
}

// setupMounts applies the spec's filesystem view inside the new mount
// namespace. It runs as root in the init, before any confinement. wdfd is
// the supervisor's descriptor of the working directory (the spec's Cwd,
// bound at its own path): the init opens the directory in its own mount
// namespace (a bind needs a source there) without following a symbolic
// link, checks that it is the directory wdfd holds, binds it onto a
// destination also reached without a link, and returns a descriptor of
// the bound directory for the Landlock rule (-1 when the spec binds no
// working directory).
func setupMounts(s *specs.Spec, wdfd int) (int, int, error) {
	// Nothing we mount may propagate back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return 0, -1, fmt.Errorf("make / private: %w", err)
	}
	workdir := ""
	if s.Process != nil {
		workdir = s.Process.Cwd
	}
	// Bind sources are opened before anything is mounted over them, so a
	// workdir under /tmp shows through the fresh /tmp.
	srcFDs := map[string]int{}
	defer func() {
		for _, fd := range srcFDs {
			unix.Close(fd)
		}
	}()
	for _, m := range s.Mounts {
		if m.Type != "bind" {
			continue
		}
		if m.Destination == workdir && m.Source == workdir {
			fd, err := openWorkdirSource(workdir, wdfd)
			if err != nil {
				return 0, -1, err
			}
			srcFDs[m.Destination] = fd
			continue
		}
		fd, err := unix.Open(m.Source, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return 0, -1, fmt.Errorf("open bind source %s: %w", m.Source, err)
		}
		srcFDs[m.Destination] = fd
	}
	n := 0
	wdMount := -1
	for _, m := range s.Mounts {
		flags, data := parseMountOptions(m.Options)
		if m.Type == "bind" && m.Destination == workdir && m.Source == workdir {
			fd, err := bindWorkdir(srcFDs[m.Destination], workdir, flags)
			if err != nil {
				return n, -1, err
			}
			wdMount = fd
			n++
			continue
		}
		if m.Type == "bind" {
			if err := bindTarget(srcFDs[m.Destination], m.Destination); err != nil {
				return n, -1, fmt.Errorf("mount %s: %w", m.Destination, err)
			}
			src := fmt.Sprintf("/proc/self/fd/%d", srcFDs[m.Destination])
			if err := unix.Mount(src, m.Destination, "", flags&(unix.MS_BIND|unix.MS_REC), ""); err != nil {
				return n, -1, fmt.Errorf("bind %s: %w", m.Destination, err)
			}
			if rest := flags &^ (unix.MS_BIND | unix.MS_REC); rest != 0 {
				if err := remount(m.Destination, rest); err != nil {
					return n, -1, err
				}
			}
			n++
			continue
		}
		if err := os.MkdirAll(m.Destination, 0o755); err != nil {
			return n, -1, fmt.Errorf("mount %s: %w", m.Destination, err)
		}
		if err := unix.Mount(m.Source, m.Destination, m.Type, flags, data); err != nil {
			return n, -1, fmt.Errorf("mount %s on %s: %w", m.Type, m.Destination, err)
		}
		n++
		if m.Destination == "/dev" {
			if err := populateDev(s); err != nil {
				return n, -1, err
			}
		}
	}
	if err := finishDev(); err != nil {
		return n, -1, err
	}
	for _, p := range s.Linux.MaskedPaths {
		if err := maskPath(p); err != nil {
			return n, -1, err
		}
	}
	for _, p := range s.Linux.ReadonlyPaths {
		if err := readonlyPath(p); err != nil {
			return n, -1, err
		}
	}
	return n, wdMount, nil
}

// openWorkdirSource opens the working directory in the init's mount
// namespace without following a symbolic link and checks that it is the
// directory the supervisor holds (wdfd): the supervisor resolved and
// opened it, so a link planted since, or a directory renamed into its
// place, is refused rather than bound.
func openWorkdirSource(workdir string, wdfd int) (int, error) {
	if wdfd < 0 {
		return -1, fmt.Errorf("working directory %s: the supervisor sent no descriptor of it", workdir)
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, workdir, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return -1, fmt.Errorf("working directory %s: %w (it changed since the supervisor opened it)", workdir, err)
	}
	if !sameDir(fd, wdfd) {
		unix.Close(fd)
		return -1, fmt.Errorf("working directory %s is no longer the directory the supervisor opened", workdir)
	}
	return fd, nil
}

// bindWorkdir binds the working directory src at its own path: the
// destination's missing directories (under a fresh /tmp) are created and
// every component is opened without following a symbolic link, the bind
// goes through both descriptors, and the bound directory is opened again
// (no link followed) and checked to be src, for the Landlock rule.
func bindWorkdir(src int, workdir string, flags uintptr) (int, error) {
	dst, err := openDirNoFollow(workdir, true)
	if err != nil {
		return -1, fmt.Errorf("mount %s: %w", workdir, err)
	}
	err = unix.Mount(fmt.Sprintf("/proc/self/fd/%d", src), fmt.Sprintf("/proc/self/fd/%d", dst), "", flags&(unix.MS_BIND|unix.MS_REC), "")
	unix.Close(dst)
	if err != nil {
		return -1, fmt.Errorf("bind %s: %w", workdir, err)
	}
	bound, err := openDirNoFollow(workdir, false)
	if err != nil {
		return -1, fmt.Errorf("mount %s: %w", workdir, err)
	}
	if !sameDir(bound, src) {
		unix.Close(bound)
		return -1, fmt.Errorf("mount %s: the bound directory is not the working directory", workdir)
	}
	if rest := flags &^ (unix.MS_BIND | unix.MS_REC); rest != 0 {
		if err := remount(fmt.Sprintf("/proc/self/fd/%d", bound), rest); err != nil {
			unix.Close(bound)
			return -1, fmt.Errorf("mount %s: %w", workdir, err)
		}
	}
	return bound, nil
}

// openDirNoFollow opens the directory path component by component from /,
// never following a symbolic link; with create, a missing component is
// made (mode 0755) in its parent first.
func openDirNoFollow(path string, create bool) (int, error) {
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	for _, c := range strings.Split(strings.TrimPrefix(filepath.Clean(path), "/"), "/") {
		if c == "" {
			continue
		}
		how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
		next, err := unix.Openat2(fd, c, how)
		if errors.Is(err, unix.ENOENT) && create {
			if err = unix.Mkdirat(fd, c, 0o755); err == nil || errors.Is(err, unix.EEXIST) {
				next, err = unix.Openat2(fd, c, how)
			}
		}
		unix.Close(fd)
		if err != nil {
			return -1, fmt.Errorf("%s: %w (a symbolic link or not a directory)", c, err)
		}
		fd = next
	}
	return fd, nil
}

// bindTarget makes sure a bind mount has something to land on: a
// directory for a directory source; for a file source the existing file,
// or an empty one created in its (already mounted, sandbox-private)
// parent — a file bind never lands on a directory.
func bindTarget(srcFD int, dst string) error {
	var st unix.Stat_t
	if err := unix.Fstat(srcFD, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return os.MkdirAll(dst, 0o755)
	}
	fi, err := os.Lstat(dst)
	switch {
	case err == nil && fi.Mode().IsRegular():
		return nil
	case err == nil:
		return fmt.Errorf("file bind target is not a regular file (%s)", fi.Mode().Type())
	case !errors.Is(err, os.ErrNotExist):
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

func remount(dst string, flags uintptr) error {
	// A bind remount must keep the locked flags of the underlying mount.
	var st unix.Statfs_t
	if err := unix.Statfs(dst, &st); err == nil {
		for _, f := range []uintptr{unix.MS_NOSUID, unix.MS_NODEV, unix.MS_NOEXEC, unix.MS_RDONLY} {
			if uintptr(st.Flags)&f != 0 {
				flags |= f
			}
		}
	}
	if err := unix.Mount("", dst, "", unix.MS_REMOUNT|unix.MS_BIND|flags, ""); err != nil {
		return fmt.Errorf("remount %s: %w", dst, err)
	}
	return nil
}

// populateDev creates the spec's device nodes in the fresh /dev tmpfs.
func populateDev(s *specs.Spec) error {
	old := unix.Umask(0)
	defer unix.Umask(old)
	for _, d := range s.Linux.Devices {
		mode := uint32(0o666)
		if d.FileMode != nil {
			mode = uint32(*d.FileMode)
		}
		var typ uint32
		switch d.Type {
		case "c", "u":
			typ = unix.S_IFCHR
		case "b":
			return fmt.Errorf("device %s: block devices are never created in a sandbox", d.Path)
		default:
			return fmt.Errorf("device %s: unsupported type %q", d.Path, d.Type)
		}
		if err := unix.Mknod(d.Path, typ|mode, int(unix.Mkdev(uint32(d.Major), uint32(d.Minor)))); err != nil {
			return fmt.Errorf("mknod %s: %w", d.Path, err)
		}
	}
	links := map[string]string{
		"/dev/fd": "/proc/self/fd", "/dev/stdin": "/proc/self/fd/0",
		"/dev/stdout": "/proc/self/fd/1", "/dev/stderr": "/proc/self/fd/2",
		"/dev/ptmx": "pts/ptmx",
	}
	for l, t := range links {
		if err := os.Symlink(t, l); err != nil {
			return fmt.Errorf("symlink %s: %w", l, err)
		}
	}
	return nil
}

// finishDev makes the /dev tmpfs read-only once its nodes and submounts
// exist: nothing in the sandbox can add a node or a file there.
func finishDev() error {
	if err := unix.Mount("", "/dev", "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("remount /dev read-only: %w", err)
	}
	return nil
}

func maskPath(p string) error {
	fi, err := os.Stat(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("mask %s: %w", p, err)
	}
	if fi.IsDir() {
		err = unix.Mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0,mode=000")
	} else {
		err = unix.Mount("/dev/null", p, "", unix.MS_BIND, "")
	}
	if err != nil {
		return fmt.Errorf("mask %s: %w", p, err)
	}
	return nil
}

func readonlyPath(p string) error {
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s read-only: %w", p, err)
	}
	return remount(p, unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC)
}

// checkStorage proves that path is a tmpfs the sandbox user can write:
// Linux (we are), tmpfs magic, sticky world-writable mode, its
// mac-test-pgdata directory owned by the sandbox user, and a probe file
// created with the sandbox's filesystem identity.
//
// It runs as root in the init, for a run before the agent starts and
// again for every exec, when the agent has had the storage to itself:
// nothing below path is trusted. Everything is done relative to a
// descriptor of path, without following a symlink, and what is created
// is created by the sandbox user (fsuid/fsgid, which drops the
// filesystem capabilities), never by root and then chowned.
func checkStorage(path string, uid, gid uint32) error {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil || unix.ByteSliceToString(u.Sysname[:]) != "Linux" {
		return fmt.Errorf("storage preflight: not running on Linux")
	}
	dfd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("storage preflight: %s: %w", path, err)
	}
	defer unix.Close(dfd)
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(dfd, &sfs); err != nil {
		return fmt.Errorf("storage preflight: %s: %w", path, err)
	}
	if sfs.Type != unix.TMPFS_MAGIC {
		return fmt.Errorf("storage preflight: %s is not a tmpfs (magic %#x)", path, sfs.Type)
	}
	var st unix.Stat_t
	if err := unix.Fstat(dfd, &st); err != nil || st.Mode&0o7777 != 0o1777 {
		return fmt.Errorf("storage preflight: %s must be mode 1777", path)
	}
	err, setupErr := runAsIdentity(uid, gid, func() error { return prepareStorage(dfd, path, uid) })
	if setupErr != nil {
		return fmt.Errorf("storage preflight: %w", setupErr)
	}
	return err
}

// runAsIdentity runs fn with the sandbox identity's filesystem
// credentials: no supplementary groups, fsgid gid, fsuid uid (a nonzero
// fsuid drops the filesystem capabilities, so root's DAC overrides no
// longer apply). Credentials are per-thread, so fn runs on a locked
// thread that is thrown away afterwards. A failure to take on the
// identity is setupErr, and fn does not run; fn's own error is err.
func runAsIdentity(uid, gid uint32, fn func() error) (err, setupErr error) {
	type result struct{ err, setupErr error }
	c := make(chan result, 1)
	go func() {
		lockThreadForever()
		if err := unix.Setgroups(nil); err != nil {
			c <- result{setupErr: fmt.Errorf("setgroups: %w", err)}
			return
		}
		unix.Setfsgid(int(gid))
		unix.Setfsuid(int(uid))
		// setfsuid and setfsgid report no failure; -1 reads them back.
		if u, _ := unix.SetfsuidRetUid(-1); u != int(uid) {
			c <- result{setupErr: fmt.Errorf("setfsuid %d: still %d", uid, u)}
			return
		}
		if g, _ := unix.SetfsgidRetGid(-1); g != int(gid) {
			c <- result{setupErr: fmt.Errorf("setfsgid %d: still %d", gid, g)}
			return
		}
		c <- result{err: fn()}
	}()
	r := <-c
	return r.err, r.setupErr
}

// prepareStorage makes mac-test-pgdata in the storage directory dfd (if
// missing) and checks it is a real directory of the sandbox user, then
// proves the directory writable with an unnamed temporary file. It runs
// with the sandbox user's filesystem identity.
func prepareStorage(dfd int, path string, uid uint32) error {
	const pgdata = "mac-test-pgdata"
	if err := unix.Mkdirat(dfd, pgdata, 0o700); err != nil && err != unix.EEXIST {
		return fmt.Errorf("storage preflight: %s not writable by uid %d: mkdir %s: %w", path, uid, pgdata, err)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, pgdata, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("storage preflight: %s/%s: %w", path, pgdata, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != uid {
		return fmt.Errorf("storage preflight: %s/%s is not a directory of uid %d (mode %#o, uid %d): refusing storage the sandbox has replaced",
			path, pgdata, uid, st.Mode&unix.S_IFMT, st.Uid)
	}
	fd, err := unix.Openat(dfd, ".", unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("storage preflight: %s not writable by uid %d: %w", path, uid, err)
	}
	return unix.Close(fd)
}
