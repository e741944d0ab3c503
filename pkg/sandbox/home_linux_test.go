//go:build linux

package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// makeOwnedDir never follows a symlink at the name it creates, even one
// root planted (ResolveTrusted follows root's links; this is the guard
// against one appearing between the check and the creation).
func TestMakeOwnedDirRefusesSymlinkAndFile(t *testing.T) {
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	dir := t.TempDir()
	target := t.TempDir()
	os.Symlink(target, filepath.Join(dir, "link"))
	os.Symlink(filepath.Join(dir, "missing"), filepath.Join(dir, "dangling"))
	os.WriteFile(filepath.Join(dir, "file"), nil, 0o600)
	for name, want := range map[string]string{"link": "is a symlink", "dangling": "is a symlink", "file": "is not a directory"} {
		err := makeOwnedDir(dir, name, uid, gid, "--home")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", name, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "missing")); !os.IsNotExist(err) {
		t.Errorf("a dangling link's target was created: %v", err)
	}
	if err := makeOwnedDir(dir, "new", uid, gid, "--home"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "new")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("created %v %v", fi.Mode(), err)
	}
	if err := makeOwnedDir(dir, "new", uid, gid, "--home"); err != nil {
		t.Errorf("an existing own directory is refused: %v", err)
	}
	if err := makeOwnedDir(dir, "new", uid+1, gid, "--home"); err == nil || !strings.Contains(err.Error(), "is owned by uid") {
		t.Errorf("another user's directory is accepted: %v", err)
	}
}
