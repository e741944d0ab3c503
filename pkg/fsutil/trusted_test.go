//go:build unix

package fsutil

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// TestResolveTrusted: links of this user are followed (relative,
// absolute, through ".."), a missing tail is appended as given, and a
// loop ends with ELOOP.
func TestResolveTrusted(t *testing.T) {
	t.Parallel()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, "real", "sub"), 0o755)
	os.Symlink("real", filepath.Join(dir, "rel"))
	os.Symlink(filepath.Join(dir, "real", "sub"), filepath.Join(dir, "abs"))
	os.Symlink("../../real", filepath.Join(dir, "real", "sub", "up"))
	os.Symlink("loop2", filepath.Join(dir, "loop1"))
	os.Symlink("loop1", filepath.Join(dir, "loop2"))
	for in, want := range map[string]string{
		filepath.Join(dir, "rel", "sub"):          filepath.Join(dir, "real", "sub"),
		filepath.Join(dir, "abs"):                 filepath.Join(dir, "real", "sub"),
		filepath.Join(dir, "abs", "up", "sub"):    filepath.Join(dir, "real", "sub"),
		filepath.Join(dir, "rel", "missing", "x"): filepath.Join(dir, "real", "missing", "x"),
	} {
		if got, err := ResolveTrusted(in); err != nil || got != want {
			t.Errorf("ResolveTrusted(%s) = %s, %v; want %s", in, got, err, want)
		}
	}
	if _, err := ResolveTrusted(filepath.Join(dir, "loop1", "x")); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("a symlink loop: %v, want ELOOP", err)
	}
}

// TestResolveTrustedForeignLink: a link another user owns is refused,
// naming it, its owner and its target; directories others can write
// (without the sticky bit) fail CheckDirsTrusted, sticky ones pass.
func TestResolveTrustedForeignLink(t *testing.T) {
	testutil.RequireRoot(t)
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(dir, "real"), 0o755)
	link := filepath.Join(dir, "agent")
	os.Symlink("/var", link)
	if err := os.Lchown(link, 10001, 10001); err != nil {
		t.Fatal(err)
	}
	_, err = ResolveTrusted(filepath.Join(link, "x"))
	var fe *ForeignSymlinkError
	if !errors.As(err, &fe) || fe.Path != link || fe.UID != 10001 || !strings.Contains(err.Error(), `(to "/var")`) {
		t.Errorf("another user's link: %v", err)
	}
	open := filepath.Join(dir, "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	if err := CheckDirsTrusted(filepath.Join(open, "x")); err == nil || !strings.Contains(err.Error(), "writable by others") {
		t.Errorf("below a world-writable directory: %v", err)
	}
	os.Chmod(open, 0o777|os.ModeSticky)
	if err := CheckDirsTrusted(filepath.Join(open, "x")); err != nil {
		t.Errorf("below a sticky directory: %v", err)
	}
	owned := filepath.Join(dir, "owned")
	os.Mkdir(owned, 0o755)
	os.Chown(owned, 10001, 10001)
	if err := CheckDirsTrusted(owned); err == nil || !strings.Contains(err.Error(), "owned by uid 10001") {
		t.Errorf("another user's directory: %v", err)
	}
}
