//go:build linux

package attribution

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// fileKeyOf returns the identity of the open file f, which must be a
// regular file.
func fileKeyOf(f *os.File) (fileKey, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fileKey{}, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fileKey{}, errors.New("not a regular file")
	}
	return fileKey{
		dev:   st.Dev,
		ino:   st.Ino,
		size:  st.Size,
		mtime: st.Mtim.Nano(),
		ctime: st.Ctim.Nano(),
	}, nil
}
