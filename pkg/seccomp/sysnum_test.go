package seccomp

import "testing"

// checkTable compares one architecture's table with want, both ways, and
// checks that every syscall a rule names is in the table.
func checkTable(t *testing.T, arch string, want map[string]int) {
	t.Helper()
	got := arches[arch].nr
	for name, n := range want {
		if g, ok := got[name]; !ok || g != n {
			t.Errorf("%s: %s = %d (present %v), x/sys/unix says %d", arch, name, g, ok, n)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s: %s in the table but not checked against x/sys/unix", arch, name)
		}
	}
}

// Every syscall a rule names has an entry (possibly absent) in every table.
func TestTablesNameEveryRuleSyscall(t *testing.T) {
	for _, arch := range testArches {
		for _, r := range profileRules(Config{}) {
			if r.kind != kindSyscall {
				continue
			}
			if _, ok := arches[arch].nr[r.Syscall]; !ok {
				t.Errorf("%s: rule %s names %q, which the table lacks", arch, r.Name, r.Syscall)
			}
		}
	}
}
