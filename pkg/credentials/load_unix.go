//go:build unix

package credentials

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/fsutil"
)

// ReadFile reads the credentials file at path. It refuses, naming the
// file and saying why, anything but a regular file owned by root whose
// mode gives group and others nothing (0600 or 0400), reached through
// directories and symbolic links only root can change, of at most
// MaxFileSize bytes.
func ReadFile(path string) ([]byte, error) {
	real, err := fsutil.ResolveTrusted(path)
	if err != nil {
		return nil, fmt.Errorf("credentials file %s: %w", path, err)
	}
	if err := fsutil.CheckDirsTrusted(filepath.Dir(real)); err != nil {
		return nil, fmt.Errorf("credentials file %s: %w", path, err)
	}
	// O_NONBLOCK: a FIFO without a writer must not hang; the type check
	// refuses it.
	fd, err := unix.Open(real, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("credentials file %s: %w", path, &os.PathError{Op: "open", Path: real, Err: err})
	}
	f := os.NewFile(uintptr(fd), real)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("credentials file %s: %w", path, err)
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("credentials file %s is not a regular file", path)
	case st == nil || st.Uid != 0:
		uid := -1
		if st != nil {
			uid = int(st.Uid)
		}
		return nil, fmt.Errorf("credentials file %s is owned by uid %d: it must be root's (chown root %s)", path, uid, path)
	case fi.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("credentials file %s is mode %04o: group and others must have no access (chmod 600 %s)", path, fi.Mode().Perm(), path)
	case fi.Size() > MaxFileSize:
		return nil, fmt.Errorf("credentials file %s is %d bytes: at most %d allowed", path, fi.Size(), MaxFileSize)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("credentials file %s: %w", path, err)
	}
	if len(b) > MaxFileSize {
		clear(b)
		return nil, fmt.Errorf("credentials file %s is larger than %d bytes", path, MaxFileSize)
	}
	return b, nil
}

// LoadFile reads (ReadFile) and parses (Parse) the credentials file at
// path; a parse error names the file.
func LoadFile(path string) (*File, error) {
	b, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	defer clear(b)
	f, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("credentials file %s: %w", path, err)
	}
	return f, nil
}
