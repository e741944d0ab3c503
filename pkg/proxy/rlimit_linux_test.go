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
