//go:build linux

package sandbox

import (
	"strings"
	"testing"
)

// A configuration that asks for seccomp but carries no program is refused
// before anything is installed: the init never runs a command with less
// than it was told.
func TestInstallSeccompRefusesAnEmptyFilter(t *testing.T) {
	if err := installSeccomp(nil); err == nil || !strings.Contains(err.Error(), "no filter") {
		t.Fatalf("installSeccomp(nil) = %v, want a refusal", err)
	}
}

// The supervisor's compiled filter is the real profile.
func TestCompileSeccomp(t *testing.T) {
	f, rules, err := compileSeccomp()
	if err != nil || len(f) < rules || rules < 60 {
		t.Fatalf("compileSeccomp = %d instructions, %d rules, %v", len(f), rules, err)
	}
}
