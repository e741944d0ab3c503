//go:build unix

package ocsf

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// OpenFD makes a Writer on descriptor fd, which the caller's shell opened
// and this process inherited (an events destination given as /dev/fd/N,
// which OpenFile's O_NOFOLLOW would refuse: /dev/fd/N is a symlink). It
// must be open for writing and be a pipe, a socket or a regular file. The
// Writer writes to a close-on-exec duplicate; the original (when above 2)
// is marked close-on-exec too, so it reaches no child this process starts
// unless passed on purpose.
func OpenFD(spec string, fd int) (*Writer, error) {
	f, err := InheritedFile(spec, fd)
	if err != nil {
		return nil, err
	}
	return &Writer{w: f, closer: f}, nil
}

// InheritedFile checks descriptor fd as OpenFD does and returns a
// close-on-exec duplicate of it, for a destination written other than
// as events (a probe log).
func InheritedFile(spec string, fd int) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("ocsf: events destination %s: descriptor %d is not open in this process (open it in the shell, e.g. %d>&1 or %d>>events.jsonl): %w", spec, fd, fd, fd, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFIFO, unix.S_IFSOCK, unix.S_IFREG:
	default:
		return nil, fmt.Errorf("ocsf: events destination %s: descriptor %d is a %s, not a pipe, socket or regular file", spec, fd, fileTypeName(uint32(st.Mode)))
	}
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return nil, fmt.Errorf("ocsf: events destination %s: %w", spec, err)
	}
	if acc := fl & unix.O_ACCMODE; acc != unix.O_WRONLY && acc != unix.O_RDWR {
		return nil, fmt.Errorf("ocsf: events destination %s: descriptor %d is not open for writing (use %d> or %d>>, not %d<)", spec, fd, fd, fd, fd)
	}
	nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return nil, fmt.Errorf("ocsf: events destination %s: duplicate descriptor %d: %w", spec, fd, err)
	}
	if fd > 2 {
		unix.CloseOnExec(fd)
	}
	return os.NewFile(uintptr(nfd), spec), nil
}

func fileTypeName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	case unix.S_IFDIR:
		return "directory"
	}
	return "special file"
}
