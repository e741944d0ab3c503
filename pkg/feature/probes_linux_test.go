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

func TestNetProbesRegistered(t *testing.T) {
	for _, n := range []string{"nftables", "bpf:cgroup_sock_addr", "bpf:cgroup_sock", "bpf:sock_ops", "bpf:tracepoint", "bpf:sk_msg"} {
		p, ok := Lookup(n)
		if !ok {
			t.Errorf("probe %q not registered", n)
			continue
		}
		if n == "nftables" && !p.Confinement {
			t.Error("nftables must count as a confinement feature")
		}
	}
}

// The eBPF probe must be able to fail: a program type that does not exist
// is rejected by the kernel, and an allowed one loads only as root.
func TestLoadTrivialBPFRejectsUnknownType(t *testing.T) {
	if err := loadTrivialBPF(9999, 0); err == nil {
		t.Fatal("program type 9999 loaded")
	}
}
