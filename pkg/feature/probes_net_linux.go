//go:build linux

package feature

import (
	"fmt"
	"unsafe"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
)

// eBPF program types the attribution layer may use, with the attach type
// the kernel expects at load time (0 when none).
var bpfProgTypes = []struct {
	name       string
	progType   uint32
	attachType uint32
	minKernel  string
}{
	{"bpf:cgroup_sock_addr", 18 /* BPF_PROG_TYPE_CGROUP_SOCK_ADDR */, 10 /* BPF_CGROUP_INET4_CONNECT */, "4.17"},
	{"bpf:cgroup_sock", 9 /* BPF_PROG_TYPE_CGROUP_SOCK */, 2 /* BPF_CGROUP_INET_SOCK_CREATE */, "4.10"},
	{"bpf:sock_ops", 13 /* BPF_PROG_TYPE_SOCK_OPS */, 0, "4.13"},
	{"bpf:tracepoint", 5 /* BPF_PROG_TYPE_TRACEPOINT */, 0, "4.7"},
	// The send guard (an sk_msg verdict on the sandbox's sockets):
	// without it a sandbox runs degraded, and not at all under
	// hard_requirement.
	{"bpf:sk_msg", 16 /* BPF_PROG_TYPE_SK_MSG */, 0, "4.17"},
}

func init() {
	Register(&Probe{Name: "nftables", MinKernel: "3.13", Confinement: true, Check: func() error {
		c, err := nftables.New()
		if err != nil {
			return fmt.Errorf("netlink: %w", err)
		}
		defer c.CloseLasting()
		if _, err := c.ListTables(); err != nil {
			return fmt.Errorf("list tables: %w", err)
		}
		return nil
	}})
	for _, p := range bpfProgTypes {
		p := p
		Register(&Probe{Name: p.name, MinKernel: p.minKernel, Check: func() error {
			return loadTrivialBPF(p.progType, p.attachType)
		}})
	}
}

// bpfProgLoadAttr is the prefix of union bpf_attr used by BPF_PROG_LOAD.
type bpfProgLoadAttr struct {
	progType           uint32
	insnCnt            uint32
	insns              uint64
	license            uint64
	logLevel           uint32
	logSize            uint32
	logBuf             uint64
	kernVersion        uint32
	progFlags          uint32
	progName           [16]byte
	progIfindex        uint32
	expectedAttachType uint32
}

// loadTrivialBPF loads "r0 = 1; exit" as the given program type and
// closes it: the type is usable when the verifier accepts it.
func loadTrivialBPF(progType, attachType uint32) error {
	insns := [2]uint64{
		0x00000001_000000b7, // BPF_ALU64|BPF_MOV|BPF_K r0 = 1
		0x00000000_00000095, // BPF_JMP|BPF_EXIT
	}
	license := []byte("GPL\x00")
	attr := bpfProgLoadAttr{
		progType:           progType,
		insnCnt:            2,
		insns:              uint64(uintptr(unsafe.Pointer(&insns[0]))),
		license:            uint64(uintptr(unsafe.Pointer(&license[0]))),
		expectedAttachType: attachType,
	}
	fd, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_LOAD, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if errno != 0 {
		return fmt.Errorf("BPF_PROG_LOAD type %d: %w", progType, errno)
	}
	unix.Close(int(fd))
	return nil
}
