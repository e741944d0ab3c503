//go:build linux

package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpenWorkdirRefusesSymlinks: the supervisor opens the working
// directory without following a symbolic link anywhere on its path, and
// names the link it found.
func TestOpenWorkdirRefusesSymlinks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	os.MkdirAll(filepath.Join(real, "sub"), 0o755)
	os.Symlink(real, filepath.Join(dir, "link"))
	fd, err := OpenWorkdir(filepath.Join(real, "sub"))
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	for _, p := range []string{filepath.Join(dir, "link"), filepath.Join(dir, "link", "sub")} {
		if _, err := OpenWorkdir(p); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "link")+" is a symbolic link owned by uid") {
			t.Errorf("OpenWorkdir(%s) = %v", p, err)
		}
	}
}

// TestInitWorkdirChecks: the init binds only the directory the
// supervisor holds. A directory swapped in by name after the supervisor
// opened it (renamed away, another put in its place) and a symbolic link
// put in its place are refused; the destination is walked without
// following a link, missing directories made only with create.
func TestInitWorkdirChecks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	wd := filepath.Join(dir, "repo")
	os.Mkdir(wd, 0o755)
	held, err := OpenWorkdir(wd)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(held)
	fd, err := openWorkdirSource(wd, held)
	if err != nil {
		t.Fatalf("the held directory itself: %v", err)
	}
	unix.Close(fd)
	if _, err := openWorkdirSource(wd, -1); err == nil {
		t.Errorf("no descriptor from the supervisor: accepted")
	}

	os.Rename(wd, wd+".real")
	os.Mkdir(wd, 0o755)
	if _, err := openWorkdirSource(wd, held); err == nil || !strings.Contains(err.Error(), "no longer the directory the supervisor opened") {
		t.Errorf("a directory swapped in by name: %v", err)
	}
	os.Remove(wd)
	os.Symlink(wd+".real", wd)
	if _, err := openWorkdirSource(wd, held); err == nil || !strings.Contains(err.Error(), "changed since the supervisor opened it") {
		t.Errorf("a symbolic link in its place: %v", err)
	}

	if _, err := openDirNoFollow(filepath.Join(wd, "x"), true); err == nil {
		t.Errorf("openDirNoFollow went through a symbolic link")
	}
	if _, err := os.Lstat(filepath.Join(wd+".real", "x")); err == nil {
		t.Errorf("openDirNoFollow created a directory through a symbolic link")
	}
	made := filepath.Join(dir, "a", "b")
	fd, err = openDirNoFollow(made, true)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	if fi, err := os.Lstat(made); err != nil || !fi.IsDir() {
		t.Errorf("missing directories were not made: %v", err)
	}
	if _, err := openDirNoFollow(filepath.Join(dir, "missing"), false); err == nil {
		t.Errorf("openDirNoFollow without create made or found a missing directory")
	}
}
