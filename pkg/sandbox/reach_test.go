package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOutOfReach(t *testing.T) {
	if os.Geteuid() != 0 {
		// Ownership cases need chown; the path cases run for everyone.
		t.Log("not root: ownership cases limited")
	}
	base := t.TempDir()
	os.Chmod(base, 0o755)
	wd := filepath.Join(base, "work")
	os.Mkdir(wd, 0o755)
	safeDir := filepath.Join(base, "etc")
	os.Mkdir(safeDir, 0o755)
	safe := filepath.Join(safeDir, "policy.yaml")
	os.WriteFile(safe, nil, 0o600)
	rwDir := filepath.Join(base, "shared")
	os.Mkdir(rwDir, 0o755)
	check := func(p string) error {
		return OutOfReach("--policy", p, 10001, 10001, wd, []string{rwDir, "/tmp"}, []string{"/tmp", "/dev/shm"})
	}
	if err := check(safe); err != nil {
		t.Fatalf("safe file refused: %v", err)
	}
	if err := check(filepath.Join(safeDir, "new-events.jsonl")); err != nil {
		t.Fatalf("a not-yet-existing file in a safe directory refused: %v", err)
	}
	for name, p := range map[string]string{
		"in workdir":        filepath.Join(wd, "policy.yaml"),
		"in workdir subdir": filepath.Join(wd, "a", "b.yaml"),
		"in read_write":     filepath.Join(rwDir, "policy.yaml"),
	} {
		if err := check(p); err == nil || !strings.Contains(err.Error(), "can write") {
			t.Errorf("%s: %v", name, err)
		}
	}
	// A symlinked directory that leads into the workdir is seen through.
	link := filepath.Join(base, "sneaky")
	os.Symlink(wd, link)
	if err := check(filepath.Join(link, "policy.yaml")); err == nil {
		t.Error("a path through a symlink into the workdir was accepted")
	}
	// Host /tmp is not the sandbox's /tmp: a file there is out of reach
	// (unless it is under the workdir, checked above).
	worldDir := filepath.Join(base, "world")
	os.Mkdir(worldDir, 0o777)
	os.Chmod(worldDir, 0o777)
	if err := check(filepath.Join(worldDir, "p.yaml")); err == nil || !strings.Contains(err.Error(), "world-writable") {
		t.Errorf("world-writable directory: %v", err)
	}
	worldFile := filepath.Join(safeDir, "w.yaml")
	os.WriteFile(worldFile, nil, 0o666)
	os.Chmod(worldFile, 0o666)
	if err := check(worldFile); err == nil || !strings.Contains(err.Error(), "world-writable") {
		t.Errorf("world-writable file: %v", err)
	}
	if os.Geteuid() == 0 {
		owned := filepath.Join(safeDir, "owned.yaml")
		os.WriteFile(owned, nil, 0o600)
		os.Chown(owned, 10001, 0)
		if err := check(owned); err == nil || !strings.Contains(err.Error(), "owned by the sandbox user") {
			t.Errorf("file owned by the sandbox user: %v", err)
		}
		grp := filepath.Join(safeDir, "grp.yaml")
		os.WriteFile(grp, nil, 0o620)
		os.Chown(grp, 0, 10001)
		os.Chmod(grp, 0o620)
		if err := check(grp); err == nil || !strings.Contains(err.Error(), "sandbox group") {
			t.Errorf("group-writable by the sandbox group: %v", err)
		}
	}
}
