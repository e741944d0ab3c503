package runtimetune

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestEnv(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []string
		want []string
		tune bool
	}{
		{"no GODEBUG", []string{"PATH=/bin"}, []string{"PATH=/bin", "GODEBUG=" + Setting}, true},
		{"empty GODEBUG", []string{"GODEBUG=", "A=1"}, []string{"GODEBUG=" + Setting, "A=1"}, true},
		{"other settings kept in order", []string{"GODEBUG=http2client=0,madvdontneed=1"},
			[]string{"GODEBUG=http2client=0,madvdontneed=1," + Setting}, true},
		{"operator's schedtrace kept", []string{"GODEBUG=schedtrace=0"}, []string{"GODEBUG=schedtrace=0"}, false},
		{"operator's schedtrace among others", []string{"GODEBUG=gctrace=1,schedtrace=1000"},
			[]string{"GODEBUG=gctrace=1,schedtrace=1000"}, false},
		// The runtime reads the first GODEBUG and matches keys exactly.
		{"only the first GODEBUG counts", []string{"GODEBUG=gctrace=1", "GODEBUG=schedtrace=0"},
			[]string{"GODEBUG=gctrace=1," + Setting, "GODEBUG=schedtrace=0"}, true},
		{"a key that only looks like it", []string{"GODEBUG=xschedtrace=1, schedtrace=0"},
			[]string{"GODEBUG=xschedtrace=1, schedtrace=0," + Setting}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.in)
			got, tune := Env(in)
			if tune != tc.tune || !slices.Equal(got, tc.want) {
				t.Errorf("Env(%q) = %q, %v; want %q, %v", tc.in, got, tune, tc.want, tc.tune)
			}
			if !slices.Equal(in, tc.in) {
				t.Errorf("Env changed its argument to %q", in)
			}
		})
	}
}

func TestSameFileRefusesAReplacedBinary(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	os.WriteFile(a, []byte("old"), 0o755)
	os.WriteFile(b, []byte("new"), 0o755)
	if err := sameFile(a, a); err != nil {
		t.Fatalf("sameFile(a, a) = %v", err)
	}
	// An upgrade renames a new file over the old path: the path names
	// another inode than the one running.
	err := sameFile(a, b)
	if err == nil || !strings.Contains(err.Error(), "no longer the running binary") {
		t.Fatalf("sameFile(a, b) = %v, want a refusal", err)
	}
}
