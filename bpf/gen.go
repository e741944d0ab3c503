// Package bpf holds Palisade's eBPF programs, compiled and embedded: the
// connect-time attribution programs of attr.c (cgroup connect4/connect6
// and sockops on the sandbox's v2 cgroup; fork/exec/exit and
// descriptor-passing and connect tracepoints filtered to it; the
// code-identity tracepoints after mmap, mprotect and shmat; the send
// guard's sk_msg program on the sandbox's established sockets).
// pkg/attribution loads them (LoadAttr) and reads their maps.
//
// The generated attr_bpfel.go and attr_bpfel.o are committed, so building
// Palisade needs no clang. `make generate` rebuilds them with bpf2go (the
// version pinned in go.mod's tool block) and clang; TestGeneratedUpToDate
// fails when the committed objects differ from what the sources compile to.
package bpf

//go:generate sh gen.sh
