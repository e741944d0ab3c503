package attribution

import (
	"slices"
	"testing"
)

const mapsSample = `55d0c0a00000-55d0c0a08000 r--p 00000000 08:01 1835047                    /usr/bin/curl
55d0c0a08000-55d0c0a2b000 r-xp 00008000 08:01 1835047                    /usr/bin/curl
7f1a2c000000-7f1a2c021000 rw-p 00000000 00:00 0 
7f1a2d200000-7f1a2d226000 r--p 00000000 08:01 1311012                    /usr/lib/x86_64-linux-gnu/libc.so.6
7f1a2d226000-7f1a2d39b000 r-xp 00026000 08:01 1311012                    /usr/lib/x86_64-linux-gnu/libc.so.6
7f1a2d400000-7f1a2d401000 r-xp 00001000 00:2a 17                         /work/my lib.so (deleted)
7f1a2d500000-7f1a2d501000 r-xp 00000000 00:01 2048                       /memfd:jit (deleted)
7f1a2d600000-7f1a2d601000 rwxp 00000000 00:00 0 
7ffc1b9e0000-7ffc1b9e2000 r-xp 00000000 00:00 0                          [vdso]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
`

func TestParseMaps(t *testing.T) {
	var got []mapping
	if err := parseMaps([]byte(mapsSample), func(m mapping) { got = append(got, m) }); err != nil {
		t.Fatal(err)
	}
	want := []mapping{
		{path: "/usr/bin/curl", dev: mkdev(8, 1), ino: 1835047},
		{path: "/usr/lib/x86_64-linux-gnu/libc.so.6", dev: mkdev(8, 1), ino: 1311012},
		{path: "/work/my lib.so", dev: mkdev(0, 0x2a), ino: 17, deleted: true},
		{path: "/memfd:jit", dev: mkdev(0, 1), ino: 2048, deleted: true},
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	for _, bad := range []string{"55d0-55d1 r-xp 0 08:01\n", "1-2 r-xp 0 0801 5 /x\n", "1-2 r-xp 0 08:01 five /x\n"} {
		if err := parseMaps([]byte(bad), func(mapping) {}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestCodeReasons(t *testing.T) {
	if got := codeReasons(1 | 8 | 64); !slices.Equal(got, []string{CodeWritablePath, CodeDeleted, CodePtrace}) {
		t.Errorf("got %v", got)
	}
	if got := codeReasons(1 << 20); !slices.Equal(got, []string{CodeUnknown}) {
		t.Errorf("unknown bit: got %v", got)
	}
	for _, b := range codeBits {
		if codeBit(b.reason) != b.bit {
			t.Errorf("codeBit(%s) = %d, want %d", b.reason, codeBit(b.reason), b.bit)
		}
	}
}

// FuzzParseMaps: the parser never panics, and what it accepts is an
// absolute path with an inode.
func FuzzParseMaps(f *testing.F) {
	f.Add([]byte(mapsSample))
	f.Add([]byte("1-2 r-xp 0 ff:ff 1 / (deleted)\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		parseMaps(b, func(m mapping) {
			if m.ino == 0 || len(m.path) == 0 || m.path[0] != '/' {
				t.Errorf("accepted %+v", m)
			}
		})
	})
}
