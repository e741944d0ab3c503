//go:build linux

package ocsf_test

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/ocsf"
)

// /dev/fd/N names a descriptor the caller opened (3>&1 in a shell): it is
// written through, not reopened by path (O_NOFOLLOW refuses /dev/fd/N,
// a symlink), and only a pipe, socket or regular file open for writing is
// accepted.
func TestOpenDestInheritedDescriptor(t *testing.T) {
	for spec, want := range map[string]int{"/dev/fd/3": 3, "/proc/self/fd/12": 12} {
		if n, ok := ocsf.FDDest(spec); !ok || n != want {
			t.Errorf("FDDest(%q) = %d, %v", spec, n, ok)
		}
	}
	for _, spec := range []string{"/dev/fd/", "/dev/fd/3x", "/dev/fd/-1", "/dev/fdx/3", "events.jsonl", "/dev/fd/1234567890"} {
		if _, ok := ocsf.FDDest(spec); ok {
			t.Errorf("FDDest(%q) accepted", spec)
		}
	}

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	spec := fmt.Sprintf("/dev/fd/%d", w.Fd())
	ew, err := ocsf.OpenDest(spec, nil)
	if err != nil {
		t.Fatalf("OpenDest(%s) on a pipe: %v", spec, err)
	}
	if fl, _ := unix.FcntlInt(w.Fd(), unix.F_GETFD, 0); fl&unix.FD_CLOEXEC == 0 {
		t.Error("the inherited descriptor is not close-on-exec after OpenDest: it would leak to children")
	}
	if err := ew.WriteLine([]byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	ew.Close()
	w.Close() // the caller's copy; the Writer closed only its duplicate
	line, err := bufio.NewReader(r).ReadString('\n')
	if line != "{\"a\":1}\n" {
		t.Fatalf("read %q, %v", line, err)
	}

	dir, err := os.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	ro, err := os.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	notOpen := 1000
	for _, err := unix.FcntlInt(uintptr(notOpen), unix.F_GETFD, 0); err != unix.EBADF; _, err = unix.FcntlInt(uintptr(notOpen), unix.F_GETFD, 0) {
		notOpen++
	}
	for name, c := range map[string]struct {
		fd   int
		want string
	}{
		"directory": {int(dir.Fd()), "not a pipe, socket or regular file"},
		"read-only": {int(ro.Fd()), "not open for writing"},
		"not open":  {notOpen, "is not open in this process"},
	} {
		_, err := ocsf.OpenDest(fmt.Sprintf("/dev/fd/%d", c.fd), nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}
