package attribution

import (
	"bytes"
	"errors"
	"strconv"
)

// codeBits are bpf/attr.c's CODE_* bits, with their reasons.
var codeBits = []struct {
	bit    uint32
	reason string
}{
	{1, CodeWritablePath}, {2, CodeTmpfs}, {4, CodeMemfd}, {8, CodeDeleted},
	{16, CodeWorldWritable}, {32, CodeTooDeep}, {64, CodePtrace}, {128, CodeUnknown},
}

// codeReasons names the CODE_* bits set in bits (CodeUnknown for a bit
// it does not know).
func codeReasons(bits uint32) []string {
	var out []string
	for _, b := range codeBits {
		if bits&b.bit != 0 {
			out = append(out, b.reason)
			bits &^= b.bit
		}
	}
	if bits != 0 {
		out = append(out, CodeUnknown)
	}
	return out
}

// codeBit is the CODE_* bit of reason (CODE_UNKNOWN's for any other).
func codeBit(reason string) uint32 {
	for _, b := range codeBits {
		if b.reason == reason {
			return b.bit
		}
	}
	return 128
}

// mapping is one executable file mapping of /proc/<pid>/maps.
type mapping struct {
	path     string // as the process's mount namespace names it
	dev, ino uint64 // dev in stat(2)'s encoding
	deleted  bool   // the kernel appended " (deleted)"
}

// parseMaps calls fn for each executable mapping of a file in a
// /proc/<pid>/maps text (anonymous code, [vdso] and the like are
// skipped: they are no file's). Lines are "start-end perms offset
// major:minor inode path"; the path may hold spaces (a newline in it is
// written \012 by the kernel). No library parses this; it is read only
// for the /proc fallback of code identity, once per lookup.
func parseMaps(b []byte, fn func(mapping)) error {
	for line := range bytes.Lines(b) {
		line = bytes.TrimSuffix(line, []byte("\n"))
		// Five fields, then the path after the spaces that pad it.
		var f [5][]byte
		rest := line
		for i := range f {
			rest = bytes.TrimLeft(rest, " ")
			j := bytes.IndexByte(rest, ' ')
			if j < 0 {
				j = len(rest)
			}
			f[i], rest = rest[:j], rest[j:]
		}
		if len(f[4]) == 0 {
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			return errors.New("maps: too few fields")
		}
		if len(f[1]) != 4 || f[1][2] != 'x' {
			continue
		}
		path := string(bytes.TrimLeft(rest, " "))
		ino, err := strconv.ParseUint(string(f[4]), 10, 64)
		if err != nil {
			return errors.New("maps: inode is not a number")
		}
		if ino == 0 || len(path) == 0 || path[0] != '/' {
			continue // anonymous, [vdso], [vsyscall]
		}
		maj, min, ok := bytes.Cut(f[3], []byte(":"))
		if !ok {
			return errors.New("maps: device is not major:minor")
		}
		ma, err1 := strconv.ParseUint(string(maj), 16, 32)
		mi, err2 := strconv.ParseUint(string(min), 16, 32)
		if err1 != nil || err2 != nil {
			return errors.New("maps: device is not major:minor")
		}
		m := mapping{path: path, dev: mkdev(ma, mi), ino: ino}
		if p, ok := bytes.CutSuffix([]byte(path), []byte(" (deleted)")); ok {
			m.path, m.deleted = string(p), true
		}
		fn(m)
	}
	return nil
}

// mkdev is stat(2)'s encoding of a device number (glibc's makedev).
func mkdev(major, minor uint64) uint64 {
	return (major&0xfff)<<8 | (major&^0xfff)<<32 | minor&0xff | (minor&^0xff)<<12
}
