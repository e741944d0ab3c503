//go:build linux

package feature

import "testing"

func TestLinuxProbesRegistered(t *testing.T) {
	for _, n := range []string{"landlock", "seccomp", "ns:mnt", "ns:pid", "ns:net", "ns:cgroup", "ns:user", "cgroup", "root"} {
		if _, ok := Lookup(n); !ok {
			t.Errorf("probe %q not registered", n)
		}
	}
	// The namespace probes read /proc/self/ns, which every Linux test host has.
	if err := Check("ns:mnt"); err != nil {
		t.Fatalf("ns:mnt: %v", err)
	}
}
