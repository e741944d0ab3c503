//go:build linux

package proxy

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestCheckFDLimit(t *testing.T) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	fits := int((rl.Cur - 64) / FDsPerTunnel)
	if err := CheckFDLimit(fits); err != nil {
		t.Errorf("%d conns within a limit of %d: %v", fits, rl.Cur, err)
	}
	if err := CheckFDLimit(fits + 1); err == nil || !strings.Contains(err.Error(), "--max-conns") {
		t.Errorf("%d conns beyond a limit of %d: %v", fits+1, rl.Cur, err)
	}
}

// The default --max-conns never warns: the limit is raised when the
// process may (root), else the connection limit shrinks to fit, and only
// an explicit --max-conns that cannot fit is an error.
func TestFitFDs(t *testing.T) {
	need := uint64(DefaultMaxConns)*FDsPerTunnel + 64
	refuse := func(unix.Rlimit) error { return unix.EPERM }
	var got unix.Rlimit
	accept := func(r unix.Rlimit) error { got = r; return nil }

	if n, note, err := fitFDs(unix.Rlimit{Cur: need, Max: need}, DefaultMaxConns, false, refuse); n != DefaultMaxConns || note != "" || err != nil {
		t.Errorf("fits already: %d %q %v", n, note, err)
	}
	n, note, err := fitFDs(unix.Rlimit{Cur: 20000, Max: 20000}, DefaultMaxConns, false, accept)
	if n != DefaultMaxConns || err != nil || got.Cur != need || got.Max != need || !strings.Contains(note, "raised") {
		t.Errorf("root raises: %d %q %v, set %+v", n, note, err, got)
	}
	n, note, err = fitFDs(unix.Rlimit{Cur: 20000, Max: 20000}, DefaultMaxConns, false, refuse)
	if want := (20000 - 64) / FDsPerTunnel; n != want || err != nil || !strings.Contains(note, "lowered") {
		t.Errorf("no raise, default: %d %q %v, want %d", n, note, err, want)
	}
	if _, _, err = fitFDs(unix.Rlimit{Cur: 20000, Max: 20000}, DefaultMaxConns, true, refuse); err == nil || !strings.Contains(err.Error(), "--max-conns") {
		t.Errorf("explicit --max-conns beyond the limit: %v, want an error", err)
	}
}
