//go:build linux

package bpf

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// TestGeneratedUpToDate compiles attr.c again (gen.sh, with the pinned
// bpf2go and this machine's clang) into a temporary directory and fails
// when the committed attr_bpfel.o or attr_bpfel.go differ: an edit to
// attr.c without `make generate`, or a hand edit of the generated files.
// clang's output does not depend on the checkout's path (bpf2go strips
// the debug info that would hold it), so the comparison is exact. It
// needs clang and libbpf's headers, which .ci/run installs; a different
// clang major version may compile differently, and the failure then
// names the version used.
func TestGeneratedUpToDate(t *testing.T) {
	clang := testutil.RequireCommand(t, "clang")
	_, err := os.Stat("/usr/include/bpf/bpf_helpers.h")
	testutil.RequireData(t, "libbpf headers (apt install libbpf-dev)", err)
	out := t.TempDir()
	cmd := exec.Command("sh", "gen.sh")
	cmd.Env = append(os.Environ(), "BPF_OUT="+out)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gen.sh: %v\n%s", err, msg)
	}
	version, _ := exec.Command(clang, "--version").Output()
	for _, name := range []string{"attr_bpfel.o", "attr_bpfel.go"} {
		want, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(name)
		if errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is not committed; run make generate", name)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("committed %s differs from what attr.c compiles to (%d vs %d bytes) with %s; run make generate and commit the result",
				name, len(got), len(want), bytes.TrimSpace(bytes.SplitN(version, []byte("\n"), 2)[0]))
		}
	}
}
