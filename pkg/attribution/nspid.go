package attribution

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
)

// SandboxPID returns the pid that host process pid has in its own
// (innermost) pid namespace, as the process itself sees it: the
// "NSpid:" line of /proc/<pid>/status (procRoot "" means /proc). The
// proxy tells an agent this pid, never the host's: a host pid helps an
// agent aim pid reuse at the host-wide pid space that attribution keys
// on. Errors name the file.
func SandboxPID(procRoot string, pid int) (int, error) {
	if procRoot == "" {
		procRoot = "/proc"
	}
	path := procRoot + "/" + strconv.Itoa(pid) + "/status"
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("attribution: %w", err)
	}
	n, err := parseNSpid(b)
	if err != nil {
		return 0, fmt.Errorf("attribution: %s: %w", path, err)
	}
	return n, nil
}

// parseNSpid returns the last pid of the NSpid line of a
// /proc/<pid>/status file: the pid in the innermost namespace.
func parseNSpid(status []byte) (int, error) {
	for line := range bytes.Lines(status) {
		rest, ok := bytes.CutPrefix(line, []byte("NSpid:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) == 0 {
			return 0, errors.New("NSpid: no pid")
		}
		n, err := strconv.Atoi(string(f[len(f)-1]))
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("NSpid: %q is not a pid", f[len(f)-1])
		}
		return n, nil
	}
	return 0, errors.New("no NSpid line")
}
