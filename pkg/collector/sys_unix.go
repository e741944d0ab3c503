//go:build unix

package collector

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// fileIdentity returns the device and inode of a file.
func fileIdentity(fi os.FileInfo) (fileID, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{Dev: uint64(st.Dev), Ino: uint64(st.Ino)}, true
}

// lockDir takes an exclusive advisory lock on dir/lock so that two
// collectors never share a spool. The lock lives as long as the file.
func lockDir(dir string) (*os.File, error) {
	p := filepath.Join(dir, "lock")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", p, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("spool %s is in use by another ocsf-collector (lock %s: %v); give each collector its own --spool", dir, p, err)
	}
	return f, nil
}
