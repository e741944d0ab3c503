package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// reachDirs makes base (0755) with a working directory and a safe
// directory in it.
func reachDirs(t *testing.T) (base, wd, safeDir string) {
	base = t.TempDir()
	os.Chmod(base, 0o755)
	wd = filepath.Join(base, "work")
	os.Mkdir(wd, 0o755)
	safeDir = filepath.Join(base, "etc")
	os.Mkdir(safeDir, 0o755)
	return base, wd, safeDir
}

// The path cases of OutOfReach: writable by the sandbox through the
// working directory, a read_write path, a symlink, world-writable bits.
func TestOutOfReach(t *testing.T) {
	base, wd, safeDir := reachDirs(t)
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
}

// The ownership cases of OutOfReach (they need chown, so root): a file
// owned by the sandbox user, or writable by the sandbox group.
func TestOutOfReachOwnership(t *testing.T) {
	testutil.RequireRoot(t)
	_, wd, safeDir := reachDirs(t)
	check := func(p string) error {
		return OutOfReach("--policy", p, 10001, 10001, wd, nil, []string{"/tmp", "/dev/shm"})
	}
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

// A policy filesystem entry inside a path the sandbox can write is
// refused (the agent could swap it for a symlink between runs); entries
// elsewhere, the writable paths themselves and paths under the private
// /tmp are accepted.
func TestCheckPolicyPaths(t *testing.T) {
	base := t.TempDir()
	wd := filepath.Join(base, "work")
	shared := filepath.Join(base, "shared")
	outside := filepath.Join(base, "outside")
	for _, d := range []string{wd, filepath.Join(wd, "sub"), shared, outside} {
		os.MkdirAll(d, 0o755)
	}
	// A root-owned symlink elsewhere that leads into the working directory.
	via := filepath.Join(base, "via")
	os.Symlink(filepath.Join(wd, "sub"), via)
	// What an agent plants: a symlink in the workdir to a directory outside.
	planted := filepath.Join(wd, "planted")
	os.Symlink(outside, planted)
	pol := func(ro, rw []string) PolicyInfo {
		return PolicyInfo{ReadOnly: ro, ReadWrite: append([]string{"/tmp", "/dev/null"}, rw...), IncludeWorkdir: true}
	}
	private := []string{"/tmp", "/dev/null"}
	for name, p := range map[string]PolicyInfo{
		"system paths":           pol([]string{"/usr", "/bin", "/lib", "/etc"}, nil),
		"the workdir itself":     pol([]string{wd}, []string{wd}),
		"a read_write path":      pol([]string{shared}, []string{shared}),
		"an ancestor of workdir": pol([]string{base}, nil),
		"under private /tmp":     pol([]string{"/tmp/x"}, nil),
		"outside":                pol([]string{outside}, nil),
	} {
		if err := CheckPolicyPaths(p, wd, private); err != nil {
			t.Errorf("%s: refused: %v", name, err)
		}
	}
	for name, c := range map[string]struct {
		p    PolicyInfo
		want string
	}{
		"read_only in workdir":        {pol([]string{filepath.Join(wd, "sub")}, nil), "filesystem_policy.read_only[0] " + filepath.Join(wd, "sub")},
		"read_write in workdir":       {pol(nil, []string{filepath.Join(wd, "sub")}), "filesystem_policy.read_write[2] " + filepath.Join(wd, "sub")},
		"planted symlink in workdir":  {pol([]string{planted}, nil), planted},
		"not yet existing in workdir": {pol([]string{filepath.Join(wd, "later", "x")}, nil), "working directory"},
		"through a symlink into wd":   {pol([]string{via}, nil), "working directory"},
		"inside another read_write":   {pol([]string{filepath.Join(shared, "x")}, []string{shared}), "filesystem_policy.read_write[2] " + shared},
		"dot-dot into workdir":        {pol([]string{outside + "/../work/sub"}, nil), "working directory"},
	} {
		err := CheckPolicyPaths(c.p, wd, private)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "symlink") {
			t.Errorf("%s: %v, want a refusal naming %q", name, err, c.want)
		}
	}
}

// The policy-path check runs on every start. Baseline: one lstat per
// entry, the least any check of the paths on disk costs. On the 2-CPU
// development VM under a load average of about 30 (2026-12-01, three
// runs of 2000): baseline 18-42 µs, check 61-165 µs per start (3-4x, the
// symlinked /bin, /lib... being resolved), under 2% of a start there.
func BenchmarkCheckPolicyPaths(b *testing.B) {
	p := PolicyInfo{
		ReadOnly:  []string{"/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", "/dev/random", "/dev/urandom", "/dev/zero"},
		ReadWrite: []string{"/tmp", "/dev/null"}, IncludeWorkdir: true,
	}
	wd := b.TempDir()
	b.Run("lstat-baseline", func(b *testing.B) {
		for b.Loop() {
			for _, e := range append(append([]string{wd}, p.ReadOnly...), p.ReadWrite...) {
				os.Lstat(e)
			}
		}
	})
	b.Run("check", func(b *testing.B) {
		for b.Loop() {
			if err := CheckPolicyPaths(p, wd, []string{"/tmp", "/dev/null"}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
