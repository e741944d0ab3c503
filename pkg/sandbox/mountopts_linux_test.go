//go:build linux

package sandbox

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseMountOptionsLinux(t *testing.T) {
	f, d := parseMountOptions([]string{"nosuid", "nodev", "ro", "rw", "mode=1777", "size=8g", "rbind"})
	if f != unix.MS_NOSUID|unix.MS_NODEV|unix.MS_BIND|unix.MS_REC {
		t.Errorf("flags %#x", f)
	}
	if d != "mode=1777,size=8g" {
		t.Errorf("data %q", d)
	}
}
