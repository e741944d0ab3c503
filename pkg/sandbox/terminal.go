package sandbox

import (
	"io"
	"os"

	"github.com/containerd/console"
)

// IsTerminal reports whether r is an *os.File open on a terminal.
func IsTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	_, err := console.ConsoleFromFile(f)
	return err == nil
}
