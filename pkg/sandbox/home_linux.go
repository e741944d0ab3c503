//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// prepareHome makes the sandbox's HOME and returns the host directory to
// bind at the command's HOME: with --home (o.Home) that directory as
// resolved by CheckHome, created if missing; without, <state dir>/home, created with the
// sandbox. Either way it is owned by the sandbox identity (a new one
// mode 0700) and made without following a symlink (makeOwnedDir).
func (s *Sandbox) prepareHome(workdir string) (string, error) {
	if s.o.Home != "" {
		home, real, err := CheckHome(s.o.Home, workdir, s.o.Policy.ReadWrite, PrivateReadWrite, s.uid, s.gid)
		if err != nil {
			return "", err
		}
		if home == workdir {
			if !s.o.Policy.IncludeWorkdir {
				return "", fmt.Errorf("--home %s is the working directory, which this policy (include_workdir: false) does not let the sandbox write", home)
			}
			return home, nil // bound already, as the working directory
		}
		if err := makeOwnedDir(filepath.Dir(real), filepath.Base(real), s.uid, s.gid, "--home"); err != nil {
			return "", err
		}
		return real, nil
	}
	dir, err := s.store.Dir(s.name)
	if err != nil {
		return "", err
	}
	if err := makeOwnedDir(dir, HomeDirName, s.uid, s.gid, "HOME"); err != nil {
		return "", err
	}
	return filepath.Join(dir, HomeDirName), nil
}

// makeOwnedDir creates name in the directory parent, mode 0700 and
// owned by uid:gid, or accepts an existing directory there that uid
// owns. parent is opened as it is named (its path is trusted: CheckHome
// refuses one the sandbox could change); name itself is never followed:
// mkdirat does not follow a last component, and the directory is
// re-opened with openat2 RESOLVE_BENEATH and RESOLVE_NO_SYMLINKS before
// its owner is changed or checked through the descriptor. A symlink, a
// file or another user's directory under that name is an error naming
// the path and label.
func makeOwnedDir(parent, name string, uid, gid uint32, label string) error {
	path := filepath.Join(parent, name)
	pfd, err := unix.Open(parent, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%s %s: open its directory: %w", label, path, err)
	}
	defer unix.Close(pfd)
	created := true
	if err := unix.Mkdirat(pfd, name, 0o700); err != nil {
		if !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("%s %s: create: %w", label, path, err)
		}
		created = false
	}
	fd, err := unix.Openat2(pfd, name, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	var lst unix.Stat_t
	if err != nil && unix.Fstatat(pfd, name, &lst, unix.AT_SYMLINK_NOFOLLOW) == nil && lst.Mode&unix.S_IFMT == unix.S_IFLNK {
		err = unix.ELOOP // O_NOFOLLOW with O_DIRECTORY reports a symlink as ENOTDIR
	}
	switch {
	case errors.Is(err, unix.ELOOP):
		return fmt.Errorf("%s %s is a symlink; it must be a directory (remove the link or choose another path)", label, path)
	case errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("%s %s exists and is not a directory (remove it or choose another path)", label, path)
	case err != nil:
		return fmt.Errorf("%s %s: open: %w", label, path, err)
	}
	defer unix.Close(fd)
	if created {
		if err := unix.Fchown(fd, int(uid), int(gid)); err != nil {
			return fmt.Errorf("%s %s: chown: %w", label, path, err)
		}
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("%s %s: %w", label, path, err)
	}
	if st.Uid != uid {
		return fmt.Errorf("%s %s is owned by uid %d, not the sandbox identity (uid %d): `chown -R %d:%d %s` or choose another path",
			label, path, st.Uid, uid, uid, gid, path)
	}
	return nil
}
