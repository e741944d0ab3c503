//go:build unix

package upstreamproxy

import (
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/fsutil"
)

// readRootOnly reads a secret file that only root (or this process's
// user) may read; see ReadCredentialFile.
func readRootOnly(path string) ([]byte, error) {
	real, err := fsutil.ResolveTrusted(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	// O_NONBLOCK: a FIFO without a writer must not hang the start; the
	// type check below refuses it.
	fd, err := unix.Open(real, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, &os.PathError{Op: "open", Path: real, Err: err})
	}
	f := os.NewFile(uintptr(fd), real)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%s is not a regular file", path)
	case st != nil && st.Uid != 0 && int(st.Uid) != os.Geteuid():
		return nil, fmt.Errorf("%s is owned by uid %d: want a root-only file (chown root %s)", path, st.Uid, path)
	case fi.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("%s is mode %04o: want a root-only file, mode 0600 or stricter (chmod 600 %s)", path, fi.Mode().Perm(), path)
	case fi.Size() > MaxCredentialBytes:
		return nil, fmt.Errorf("%s is %d bytes: a credential file holds one user:pass line of at most %d bytes", path, fi.Size(), MaxCredentialBytes)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxCredentialBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > MaxCredentialBytes {
		clear(b)
		return nil, fmt.Errorf("%s is longer than %d bytes", path, MaxCredentialBytes)
	}
	return b, nil
}
