//go:build linux

package state

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// lockDir takes an exclusive flock on dir and returns the function that
// releases it. The lock is advisory: it orders Update, Remove and gc
// against each other, not against other programs.
func lockDir(dir string) (func(), error) {
	return lockPath(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW)
}

// lockFile takes an exclusive flock on the file at path, creating it.
func lockFile(path string) (func(), error) {
	return lockPath(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW)
}

func lockPath(dir string, flags int) (func(), error) {
	fd, err := unix.Open(dir, flags, 0o600)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	for {
		err = unix.Flock(fd, unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("flock %s: %w", dir, err)
	}
	return func() { unix.Close(fd) }, nil
}

func fileUID(fi os.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
