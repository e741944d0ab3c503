//go:build linux

package landlock

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// childProbe runs in a child copy of the test binary: it enforces the
// ruleset described by PALISADE_LL_RULES, then tries each operation in
// PALISADE_LL_OPS and prints one JSON object of results.
func childProbe() {
	var r Rules
	json.Unmarshal([]byte(os.Getenv("PALISADE_LL_RULES")), &r)
	runtime.LockOSThread()
	rs, err := Build(r)
	if err != nil {
		println("BUILD-ERROR", err.Error())
		os.Exit(3)
	}
	unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
	if _, err := rs.Enforce(); err != nil {
		println("ENFORCE-ERROR", err.Error())
		os.Exit(3)
	}
	out := map[string]string{}
	dir := os.Getenv("PALISADE_LL_DIR")
	try := func(name string, f func() error) {
		err := f()
		switch {
		case err == nil:
			out[name] = "ok"
		case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EXDEV):
			out[name] = "denied"
		default:
			out[name] = "error: " + err.Error()
		}
	}
	ro, rw, outside := filepath.Join(dir, "ro"), filepath.Join(dir, "rw"), filepath.Join(dir, "outside")
	try("read_ro", func() error { _, err := os.ReadFile(filepath.Join(ro, "f")); return err })
	try("write_ro", func() error { return os.WriteFile(filepath.Join(ro, "new"), []byte("x"), 0o644) })
	try("truncate_ro", func() error { return os.Truncate(filepath.Join(ro, "f"), 0) })
	try("write_rw", func() error { return os.WriteFile(filepath.Join(rw, "new"), []byte("x"), 0o644) })
	try("truncate_rw", func() error { return os.Truncate(filepath.Join(rw, "new"), 0) })
	try("read_outside", func() error { _, err := os.ReadFile(filepath.Join(outside, "secret")); return err })
	try("symlink_escape", func() error {
		// A symlink inside the writable dir that points outside grants nothing.
		l := filepath.Join(rw, "link")
		if err := os.Symlink(filepath.Join(outside, "secret"), l); err != nil {
			return err
		}
		_, err := os.ReadFile(l)
		return err
	})
	try("hardlink_escape", func() error { return os.Link(filepath.Join(outside, "secret"), filepath.Join(rw, "hl")) })
	try("rename_ro_to_rw", func() error { return os.Rename(filepath.Join(ro, "f"), filepath.Join(rw, "moved")) })
	try("mkfifo_rw", func() error { return unix.Mkfifo(filepath.Join(rw, "fifo"), 0o600) })
	try("mkdir_rw", func() error { return os.Mkdir(filepath.Join(rw, "d"), 0o755) })
	try("mkdir_ro", func() error { return os.Mkdir(filepath.Join(ro, "d"), 0o755) })
	json.NewEncoder(os.Stdout).Encode(out)
	os.Exit(0)
}

func TestEnforceFilesystemRules(t *testing.T) {
	if testutil.IsChild("landlock-probe") {
		childProbe()
	}
	testutil.RequireFeature(t, "landlock")
	dir := t.TempDir()
	for _, d := range []string{"ro", "rw", "outside"} {
		os.Mkdir(filepath.Join(dir, d), 0o755)
	}
	os.WriteFile(filepath.Join(dir, "ro", "f"), []byte("readable"), 0o644)
	os.WriteFile(filepath.Join(dir, "outside", "secret"), []byte("secret"), 0o644)
	rules, _ := json.Marshal(Rules{
		ReadOnly:        []string{filepath.Join(dir, "ro"), "/nonexistent-palisade-path"},
		ReadWrite:       []string{filepath.Join(dir, "rw")},
		HardRequirement: true,
	})
	out, err := testutil.RunInChild(t, "TestEnforceFilesystemRules", "landlock-probe",
		[]string{"PALISADE_LL_RULES=" + string(rules), "PALISADE_LL_DIR=" + dir})
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var got map[string]string
	line := out[strings.LastIndex(strings.TrimSpace(string(out)), "\n")+1:]
	if err := json.Unmarshal(line, &got); err != nil {
		t.Fatalf("child output %q: %v", out, err)
	}
	want := map[string]string{
		"read_ro": "ok", "write_ro": "denied", "truncate_ro": "denied",
		"write_rw": "ok", "truncate_rw": "ok", "read_outside": "denied",
		"symlink_escape": "denied", "hardlink_escape": "denied", "rename_ro_to_rw": "denied",
		"mkfifo_rw": "ok", "mkdir_rw": "ok", "mkdir_ro": "denied",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %q, want %q", k, got[k], v)
		}
	}
}

func TestBuildReportsSkipsAndCounts(t *testing.T) {
	testutil.RequireFeature(t, "landlock")
	dir := t.TempDir()
	f := filepath.Join(dir, "file")
	os.WriteFile(f, nil, 0o644)
	rs, err := Build(Rules{ReadOnly: []string{dir, f, "/nonexistent-palisade"}, ReadWrite: []string{t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	r := rs.Result()
	if r.ABI < MinHardABI || r.ReadOnly != 2 || r.ReadWrite != 1 || len(r.Skipped) != 1 || r.Skipped[0].Path != "/nonexistent-palisade" {
		t.Fatalf("result %+v", r)
	}
	if !strings.Contains(r.Handled, "truncate") || !strings.Contains(r.Handled, "ioctl_dev") {
		t.Fatalf("handled rights %q lack truncate", r.Handled)
	}
	if !strings.Contains(r.Scopes, "signal") || !strings.Contains(r.Scopes, "abstract_unix_socket") {
		t.Fatalf("scopes %q", r.Scopes)
	}
	if want := (r.ABI >= MinLogABI); want != (r.Logging == "new_exec_on") {
		t.Fatalf("ABI %d with logging %q", r.ABI, r.Logging)
	}
	if o := Offer(); o.ABI != r.ABI || o.Handled != r.Handled || o.Scopes != r.Scopes || o.Logging != r.Logging {
		t.Fatalf("Offer %+v differs from the built ruleset %+v", o, r)
	}
}
