//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// InitBinaryName is the init's binary (cmd/palisade-init), installed in
// the directory of the supervisor's own binary.
const InitBinaryName = "palisade-init"

// initBinFD is the descriptor the init's binary is passed on to the
// child, which executes it through /proc/self/fd (fexecve): after the
// control socket, initFD.
const initBinFD = initFD + 1

// DefaultInitExe is where the init's binary is looked for when
// Options.InitExe is empty: beside the running executable (resolved, as
// the kernel knows it), where make install and deploy/bootstrap.sh put
// every binary.
func DefaultInitExe() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("locate %s: %w", InitBinaryName, err)
	}
	return filepath.Join(filepath.Dir(exe), InitBinaryName), nil
}

// openInitBinary opens the init's binary for execution and checks that
// nobody but root can have put it there or changed it: a regular file
// (no symbolic link is followed), owned by root, executable, writable by
// neither group nor others, in a directory owned by root that group and
// others cannot write either. The checks look at the opened file, and
// the child executes that same file through the descriptor, so nothing
// swapped in at the path afterwards is run. Every error names the path.
func openInitBinary(path string) (*os.File, error) {
	fail := func(why string) error {
		return fmt.Errorf("init binary %s: %s (install it beside sandbox-supervisor with make install, owned by root, mode 0755)", path, why)
	}
	if !filepath.IsAbs(path) {
		return nil, fail("not an absolute path")
	}
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, fail("missing")
		}
		return nil, fail(err.Error())
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, fail(err.Error())
	}
	var why string
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		why = "a symbolic link"
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		why = "not a regular file"
	case st.Uid != 0:
		why = fmt.Sprintf("owned by uid %d, not root", st.Uid)
	case st.Mode&0o022 != 0:
		why = fmt.Sprintf("writable by group or others (mode %04o)", st.Mode&0o7777)
	case st.Mode&0o100 == 0:
		why = fmt.Sprintf("not executable (mode %04o)", st.Mode&0o7777)
	default:
		why = trustedDir(filepath.Dir(path))
	}
	if why != "" {
		f.Close()
		return nil, fail(why)
	}
	return f, nil
}

// trustedDir says why dir cannot be trusted to hold the init's binary
// (someone other than root could rename another file into its place),
// or "" when it can.
func trustedDir(dir string) string {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return fmt.Sprintf("its directory: %v", err)
	}
	switch {
	case st.Uid != 0:
		return fmt.Sprintf("its directory %s is owned by uid %d, not root", dir, st.Uid)
	case st.Mode&0o022 != 0:
		return fmt.Sprintf("its directory %s is writable by group or others (mode %04o)", dir, st.Mode&0o7777)
	}
	return ""
}
