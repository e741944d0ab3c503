package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	buildMu  sync.Mutex
	builtBin = map[string]string{}
	buildDir string // one directory, so binaries find each other (sandbox-supervisor runs egress-proxy from beside itself)
)

// Binary returns the path of the named cmd/ binary for integration tests:
// $PALISADE_BIN_DIR/<name> when `make test` built it, otherwise a fresh
// `go build` of ./cmd/<name> into one directory shared by every binary
// the test process builds (it lives as long as the test process).
func Binary(t testing.TB, name string) string {
	t.Helper()
	if dir := os.Getenv("PALISADE_BIN_DIR"); dir != "" {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	p := build(t, name)
	for _, c := range companions[name] {
		build(t, c)
	}
	return p
}

// build builds ./cmd/<name> into buildDir once; the caller holds buildMu.
func build(t testing.TB, name string) string {
	t.Helper()
	if p, ok := builtBin[name]; ok {
		return p
	}
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if buildDir == "" {
		dir, err := os.MkdirTemp("", "palisade-bin-")
		if err != nil {
			t.Fatal(err)
		}
		buildDir = dir
	}
	p := filepath.Join(buildDir, name)
	cmd := exec.Command("go", "build", "-o", p, "./cmd/"+name)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // as `make build` does
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/%s: %v\n%s", name, err, out)
	}
	// Writable by its owner only whatever the umask, as make build
	// leaves it: sandbox-supervisor refuses a palisade-init others
	// could have replaced.
	if err := os.Chmod(p, 0o755); err != nil {
		t.Fatal(err)
	}
	builtBin[name] = p
	return p
}

// companions are the binaries a binary runs from beside itself and
// cannot work without: sandbox-supervisor starts every sandbox's init,
// palisade-init, from its own directory.
var companions = map[string][]string{"sandbox-supervisor": {"palisade-init"}}

// ModuleRoot finds the directory holding go.mod, walking up from the
// working directory.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}
