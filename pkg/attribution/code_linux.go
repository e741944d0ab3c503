//go:build linux

package attribution

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// inodeKey is a file's device and inode as stat(2) gives them.
type inodeKey struct{ dev, ino uint64 }

// resolveWritable stats each path the sandbox may write (its workdir,
// its read_write paths, as the host sees them: the sandbox binds them
// at the same place) and returns them by identity. A path that does not
// exist is skipped: the sandbox's Landlock ruleset cannot grant it
// either. Any other error names the path.
func resolveWritable(paths []string) (map[inodeKey]string, error) {
	out := map[inodeKey]string{}
	for _, p := range paths {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("attribution: writable path %q: not absolute", p)
		}
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return nil, fmt.Errorf("attribution: writable path %s: %w", p, err)
		}
		out[inodeKey{st.Dev, st.Ino}] = p
	}
	return out, nil
}

// codeChecker classifies a process's executable mappings from
// /proc/<pid>/maps, the /proc way of code identity (the eBPF hooks see
// each mapping as it is made; this sees those present now). It walks
// each mapped file's path in the process's own mount namespace
// (/proc/<pid>/root) the way the kernel programs walk its dentries.
type codeChecker struct {
	procRoot string
	roots    map[inodeKey]string

	mu    sync.Mutex
	clean map[cleanKey]struct{}
}

// cleanKey is a file found clean: its identity and change time (a file
// replaced or renamed since has another ctime).
type cleanKey struct {
	inodeKey
	ctime int64
}

// maxCleanFiles bounds the clean-file cache (emptied when full).
const maxCleanFiles = 8192

func newCodeChecker(procRoot string, roots map[inodeKey]string) *codeChecker {
	return &codeChecker{procRoot: procRoot, roots: roots, clean: map[cleanKey]struct{}{}}
}

// check returns why pid has lost its binary's identity, nil when every
// executable mapping it has comes from a file the sandbox cannot write.
// An error reading the maps is reported as CodeUnknown (fail closed)
// unless the process is gone (ErrNotFound).
func (c *codeChecker) check(pid int) (*ForeignCode, error) {
	b, err := os.ReadFile(c.procRoot + "/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) {
			return nil, fmt.Errorf("%w: pid %d exited during attribution", ErrNotFound, pid)
		}
		return &ForeignCode{Reasons: []string{CodeUnknown}}, nil
	}
	var fc *ForeignCode
	root := c.procRoot + "/" + strconv.Itoa(pid) + "/root"
	perr := parseMaps(b, func(m mapping) {
		if fc != nil {
			return
		}
		if reason := c.classify(root, m); reason != "" {
			fc = &ForeignCode{Reasons: []string{reason}, File: m.path, dev: m.dev, ino: m.ino}
		}
	})
	if perr != nil && fc == nil {
		fc = &ForeignCode{Reasons: []string{CodeUnknown}}
	}
	return fc, nil
}

// classify returns a Code* reason for one executable mapping, "" when
// the sandbox cannot write its file.
func (c *codeChecker) classify(root string, m mapping) string {
	switch {
	case len(m.path) > 7 && m.path[:7] == "/memfd:":
		return CodeMemfd
	case m.deleted:
		return CodeDeleted
	}
	var st unix.Stat_t
	if err := unix.Stat(root+m.path, &st); err != nil || st.Dev != m.dev || st.Ino != m.ino {
		return CodeUnknown // renamed or replaced since it was mapped
	}
	key := cleanKey{inodeKey{st.Dev, st.Ino}, st.Ctim.Nano()}
	c.mu.Lock()
	_, known := c.clean[key]
	c.mu.Unlock()
	if known {
		return ""
	}
	if st.Mode&0o002 != 0 {
		return CodeWorldWritable
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(root+m.path, &fs); err != nil {
		return CodeUnknown
	}
	if (fs.Type == unix.TMPFS_MAGIC || fs.Type == unix.RAMFS_MAGIC) && fs.Flags&unix.ST_RDONLY == 0 {
		return CodeTmpfs
	}
	for dir := m.path; ; dir = filepath.Dir(dir) {
		var ds unix.Stat_t
		if err := unix.Stat(root+dir, &ds); err != nil {
			return CodeUnknown
		}
		if _, ok := c.roots[inodeKey{ds.Dev, ds.Ino}]; ok {
			return CodeWritablePath
		}
		if dir == "/" {
			break
		}
	}
	c.mu.Lock()
	if len(c.clean) >= maxCleanFiles {
		clear(c.clean)
	}
	c.clean[key] = struct{}{}
	c.mu.Unlock()
	return ""
}

// nameMapped names the file a kernel mark recorded (dev in the
// kernel's encoding): its path in /proc/<pid>/maps while it is mapped,
// else its device and inode.
func nameMapped(procRoot string, pid int, kdev uint32, ino uint64) string {
	major, minor := uint64(kdev>>20), uint64(kdev&0xfffff)
	if b, err := os.ReadFile(procRoot + "/" + strconv.Itoa(pid) + "/maps"); err == nil {
		var name string
		parseMaps(b, func(m mapping) {
			if name == "" && m.dev == mkdev(major, minor) && m.ino == ino {
				name = m.path
			}
		})
		if name != "" {
			return name
		}
	}
	return fmt.Sprintf("dev %d:%d inode %d", major, minor, ino)
}
