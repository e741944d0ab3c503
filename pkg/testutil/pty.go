package testutil

import (
	"os"
	"testing"

	"github.com/containerd/console"
)

// Pty opens a new pseudo-terminal and its slave side, both closed when
// the test ends: the master for the test to read, write and resize, the
// slave to hand a command as its terminal.
func Pty(t testing.TB) (console.Console, *os.File) {
	t.Helper()
	m, path, err := console.NewPty()
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); m.Close() })
	return m, s
}
