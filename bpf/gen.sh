#!/bin/sh
# Compiles attr.c with bpf2go (pinned in go.mod's tool block) into
# attr_bpfel.go and attr_bpfel.o, in $BPF_OUT (default: this directory).
# Run through `go generate ./bpf` or `make generate`.
set -eu
cd "$(dirname "$0")"
exec go tool bpf2go -output-dir "${BPF_OUT:-.}" -go-package bpf -tags linux -target bpfel \
	-type conn_info -type proc_info -type tuple -type lookup_ctx -type seed_ctx -type root_key -type decided_info -type violation \
	-cflags "-O2 -g -Wall -Werror -I/usr/include/$(uname -m)-linux-gnu" \
	Attr attr.c
