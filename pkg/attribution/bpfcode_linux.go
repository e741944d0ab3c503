//go:build linux

package attribution

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	palisadebpf "github.com/palisade-sandbox/palisade/bpf"
)

// codeHookTracepoints are the syscall tracepoints the code-identity
// programs attach to, by program.
var codeHookTracepoints = map[string]string{
	"code_mmap":                "sys_exit_mmap",
	"code_shmat":               "sys_exit_shmat",
	"code_mprotect_enter":      "sys_enter_mprotect",
	"code_mprotect_exit":       "sys_exit_mprotect",
	"code_pkey_mprotect_enter": "sys_enter_pkey_mprotect",
	"code_pkey_mprotect_exit":  "sys_exit_pkey_mprotect",
}

// attachCodeHooks fills the writable-roots map and attaches the
// code-identity programs (bpf/attr.c), all or none. Without them (a
// kernel that refused them, or CodeHooks HooksOff) code identity is read
// from /proc/<pid>/maps per lookup; CodeHooks then says "" and why. The
// exec tracepoint classifies each new executable either way.
func (b *BPFBackend) attachCodeHooks(cfg BPFConfig) error {
	if err := b.fillWritable(cfg.Proc.Writable); err != nil {
		return err
	}
	switch cfg.CodeHooks {
	case "", HooksTracepoints:
	case HooksOff:
		b.codeHooksErr = fmt.Errorf("turned off (BPFConfig.CodeHooks %q)", HooksOff)
		return nil
	default:
		return fmt.Errorf("attribution: BPFConfig.CodeHooks %q: want %q, %q or \"\" (the default, %q)", cfg.CodeHooks, HooksTracepoints, HooksOff, HooksTracepoints)
	}
	var links []link.Link
	fail := func(err error) error {
		for _, l := range links {
			l.Close()
		}
		if cfg.CodeHooks == HooksTracepoints {
			return fmt.Errorf("attribution: bpf: code hooks: %w", err)
		}
		b.codeHooksErr = err
		return nil
	}
	for prog, tp := range codeHookTracepoints {
		p := b.objs.opt[prog]
		if p == nil {
			return fail(fmt.Errorf("program %s not loaded: %v", prog, b.skipped["code"]))
		}
		l, err := link.Tracepoint("syscalls", tp, p, nil)
		if err != nil {
			return fail(fmt.Errorf("tracepoint syscalls/%s: %w", tp, err))
		}
		links = append(links, l)
	}
	b.links = append(b.links, links...)
	b.codeHooks = HooksTracepoints
	b.proc.kernelCode = true
	return nil
}

// fillWritable puts the sandbox's writable roots in the kernel map (its
// super_block dev encoding).
func (b *BPFBackend) fillWritable(paths []string) error {
	roots, err := resolveWritable(paths)
	if err != nil {
		return err
	}
	if len(roots) > int(b.objs.Writable.MaxEntries()) {
		return fmt.Errorf("attribution: %d writable paths: at most %d", len(roots), b.objs.Writable.MaxEntries())
	}
	for k := range roots {
		key := palisadebpf.AttrRootKey{Dev: kernelDev(k.dev), Ino: k.ino}
		if err := b.objs.Writable.Update(&key, uint8(1), ebpf.UpdateAny); err != nil {
			return fmt.Errorf("attribution: bpf: writable roots: %w", err)
		}
	}
	return nil
}

// CodeHooks names what observes executable mappings for code identity:
// HooksTracepoints, or "" when the hooks are not attached (code identity then
// reads /proc/<pid>/maps per lookup), with the reason.
func (b *BPFBackend) CodeHooks() (string, error) { return b.codeHooks, b.codeHooksErr }
