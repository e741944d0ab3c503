package seccomp

import (
	"fmt"
	"runtime"
	"sort"

	"golang.org/x/net/bpf"
)

// Offsets into struct seccomp_data.
const (
	offNr   = 0
	offArch = 4
	offArgs = 16 // args[i] at 16+8*i; its low 32 bits first on little-endian
)

// MaxInstructions is the kernel's limit on a classic BPF program
// (BPF_MAXINSNS).
const MaxInstructions = 4096

// Build compiles the profile for cfg into a classic BPF program for
// Install; it is NewProfile(cfg).Build().
func Build(cfg Config) ([]bpf.RawInstruction, error) {
	return compile(cfg, profileRules(cfg))
}

func compile(cfg Config, rules []rule) ([]bpf.RawInstruction, error) {
	archName := cfg.Arch
	if archName == "" {
		archName = runtime.GOARCH
	}
	arch, ok := arches[archName]
	if !ok {
		return nil, fmt.Errorf("seccomp: Config.Arch %q: unsupported architecture (supported: amd64, arm64)", archName)
	}
	if e := cfg.errno(); e > maxErrno {
		return nil, fmt.Errorf("seccomp: deny errno %d above MAX_ERRNO %d", e, maxErrno)
	}

	var prog []bpf.Instruction
	aIsNr := false // whether A already holds seccomp_data.nr
	bySyscall := map[uint32][]rule{}
	for _, r := range rules {
		switch r.kind {
		case kindArch:
			prog = append(prog,
				bpf.LoadAbsolute{Off: offArch, Size: 4},
				bpf.JumpIf{Cond: bpf.JumpEqual, Val: arch.audit, SkipTrue: 1},
				bpf.RetConstant{Val: uint32(r.Action)},
			)
			aIsNr = false
		case kindX32:
			if !arch.x32 {
				continue
			}
			prog = append(prog,
				bpf.LoadAbsolute{Off: offNr, Size: 4},
				bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: x32SyscallBit, SkipFalse: 1},
				bpf.RetConstant{Val: uint32(r.Action)},
			)
			aIsNr = true
		default:
			nr, known := arch.nr[r.Syscall]
			if !known {
				return nil, fmt.Errorf("seccomp: rule %s: no syscall number for %q on %s", r.Name, r.Syscall, archName)
			}
			if nr == absent {
				continue
			}
			bySyscall[uint32(nr)] = append(bySyscall[uint32(nr)], r)
		}
	}
	// The arch check must come first: syscall numbers mean nothing
	// before it. A profile without one is a programming error.
	if len(prog) < 3 || prog[0] != (bpf.LoadAbsolute{Off: offArch, Size: 4}) {
		return nil, fmt.Errorf("seccomp: profile does not start with the arch rule")
	}
	nrs := make([]uint32, 0, len(bySyscall))
	for nr := range bySyscall {
		nrs = append(nrs, nr)
	}
	sort.Slice(nrs, func(i, j int) bool { return nrs[i] < nrs[j] })

	if !aIsNr {
		prog = append(prog, bpf.LoadAbsolute{Off: offNr, Size: 4})
	}
	tree, err := searchTree(nrs, bySyscall)
	if err != nil {
		return nil, err
	}
	prog = append(prog, tree...)
	if len(prog) > MaxInstructions {
		return nil, fmt.Errorf("seccomp: filter has %d instructions, the kernel allows %d", len(prog), MaxInstructions)
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, fmt.Errorf("seccomp: assemble: %w", err)
	}
	return raw, nil
}

// searchTree emits a binary search over the sorted syscall numbers, with
// the syscall number in A. Every path through the returned code ends in a
// return, so subtrees concatenate without any jump leaving them. Syscalls
// without rules fall through to ALLOW after about log2(len(nrs))
// comparisons.
func searchTree(nrs []uint32, rules map[uint32][]rule) ([]bpf.Instruction, error) {
	switch len(nrs) {
	case 0:
		return []bpf.Instruction{bpf.RetConstant{Val: uint32(ActionAllow)}}, nil
	case 1:
		block, err := syscallBlock(rules[nrs[0]])
		if err != nil {
			return nil, err
		}
		if len(block) > 255 {
			return nil, fmt.Errorf("seccomp: syscall %d: %d instructions of rules, more than a conditional jump spans", nrs[0], len(block))
		}
		out := []bpf.Instruction{bpf.JumpIf{Cond: bpf.JumpEqual, Val: nrs[0], SkipFalse: uint8(len(block))}}
		out = append(out, block...)
		return append(out, bpf.RetConstant{Val: uint32(ActionAllow)}), nil
	}
	mid := len(nrs) / 2
	left, err := searchTree(nrs[:mid], rules)
	if err != nil {
		return nil, err
	}
	right, err := searchTree(nrs[mid:], rules)
	if err != nil {
		return nil, err
	}
	pivot := nrs[mid-1] // nr > pivot: right half
	var out []bpf.Instruction
	if len(left) <= 255 {
		out = append(out, bpf.JumpIf{Cond: bpf.JumpGreaterThan, Val: pivot, SkipTrue: uint8(len(left))})
	} else {
		// Too far for a conditional jump: hop over an unconditional one.
		out = append(out,
			bpf.JumpIf{Cond: bpf.JumpGreaterThan, Val: pivot, SkipFalse: 1},
			bpf.Jump{Skip: uint32(len(left))},
		)
	}
	out = append(out, left...)
	return append(out, right...), nil
}

// syscallBlock emits the rules of one syscall in order. Each rule's checks
// jump past its return on the first mismatch, to the next rule; the caller
// appends the final ALLOW.
func syscallBlock(rules []rule) ([]bpf.Instruction, error) {
	var out []bpf.Instruction
	for i, r := range rules {
		if len(r.checks) == 0 {
			if i != len(rules)-1 {
				return nil, fmt.Errorf("seccomp: rule %s matches every %s call and hides the rules after it", r.Name, r.Syscall)
			}
			out = append(out, bpf.RetConstant{Val: uint32(r.Action)})
			continue
		}
		code, err := ruleCode(r)
		if err != nil {
			return nil, err
		}
		out = append(out, code...)
	}
	return out, nil
}

// ruleCode emits one rule: load, optionally mask, and compare each
// checked argument's low word; return the action when all match.
func ruleCode(r rule) ([]bpf.Instruction, error) {
	// A conditional jump's failure target is the instruction after the
	// rule's return. Emit with placeholders and patch once the length is
	// known.
	var code []bpf.Instruction
	var fails []int
	for _, c := range r.checks {
		if c.arg < 0 || c.arg > 5 {
			return nil, fmt.Errorf("seccomp: rule %s: argument index %d out of range", r.Name, c.arg)
		}
		code = append(code, bpf.LoadAbsolute{Off: uint32(offArgs + 8*c.arg), Size: 4})
		switch c.op {
		case opEq, opNe:
			if c.mask != 0 {
				code = append(code, bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: c.mask})
			}
			code = append(code, bpf.JumpIf{Cond: bpf.JumpEqual, Val: c.val})
		case opAnySet:
			if c.mask != 0 {
				return nil, fmt.Errorf("seccomp: rule %s: mask with a bit-set test", r.Name)
			}
			code = append(code, bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: c.val})
		default:
			return nil, fmt.Errorf("seccomp: rule %s: unknown comparison %d", r.Name, c.op)
		}
		fails = append(fails, len(code)-1)
	}
	code = append(code, bpf.RetConstant{Val: uint32(r.Action)})
	if len(code) > 255 {
		return nil, fmt.Errorf("seccomp: rule %s is too long", r.Name)
	}
	for i, at := range fails {
		j := code[at].(bpf.JumpIf)
		skip := uint8(len(code) - at - 1)
		if r.checks[i].op == opNe {
			j.SkipTrue = skip // equal: mismatch
		} else {
			j.SkipFalse = skip
		}
		code[at] = j
	}
	return code, nil
}
