package seccomp

import (
	"encoding/json"
	"strings"
	"testing"

	"golang.org/x/net/bpf"
)

var testArches = []string{"amd64", "arm64"}

// filterVM builds cfg's filter and returns it with a VM loaded with it.
func filterVM(t testing.TB, cfg Config) ([]bpf.RawInstruction, *bpf.VM) {
	t.Helper()
	raw, err := Build(cfg)
	if err != nil {
		t.Fatalf("Build(%+v): %v", cfg, err)
	}
	prog, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatalf("filter does not disassemble completely")
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatalf("bpf.NewVM: %v", err)
	}
	return raw, vm
}

// eval runs d through both interpreters and fails the test if they differ.
func eval(t testing.TB, raw []bpf.RawInstruction, vm *bpf.VM, d seccompData) (Action, trace) {
	t.Helper()
	got, err := vm.Run(d.vmBytes())
	if err != nil {
		t.Fatalf("vm.Run(nr=%d): %v", d.nr, err)
	}
	tr, err := interpret(raw, d.kernelBytes())
	if err != nil {
		t.Fatalf("interpret(nr=%d): %v", d.nr, err)
	}
	if uint32(got) != tr.ret {
		t.Fatalf("nr=%d args=%#x: x/net VM returned %v, counting interpreter %v", d.nr, d.args, Action(got), Action(tr.ret))
	}
	return Action(tr.ret), tr
}

// The whole table, in the VM, for both architectures: each case as
// written, then with the high word of every argument (and the
// instruction pointer) replaced by junk, which must never change the
// outcome because the kernel ignores those bits.
func TestFilterTableInVM(t *testing.T) {
	for _, arch := range testArches {
		t.Run(arch, func(t *testing.T) {
			cfg := Config{Arch: arch}
			raw, vm := filterVM(t, cfg)
			audit := arches[arch].audit
			ran := 0
			for _, c := range cases() {
				nr, ok := c.nr(arch)
				if !ok {
					continue
				}
				want := c.want.action(cfg)
				d := seccompData{nr: nr, arch: audit, args: c.args}
				if got, _ := eval(t, raw, vm, d); got != want {
					t.Errorf("%s: %s%#x = %v, want %v (rule %q)", c.name, c.sys, c.args, got, want, c.rule)
				}
				for _, high := range []uint64{0, 0xffffffff, 0xdeadbeef, 0x80000000} {
					v := d
					v.ip = high<<32 | 0x401000
					for i := range v.args {
						v.args[i] = high<<32 | uint64(uint32(v.args[i]))
					}
					if got, _ := eval(t, raw, vm, v); got != want {
						t.Errorf("%s with high words %#x: %s%#x = %v, want %v", c.name, high, c.sys, v.args, got, want)
					}
				}
				ran++
			}
			if ran < 100 {
				t.Fatalf("only %d cases ran on %s", ran, arch)
			}
		})
	}
}

// Every architecture other than the filter's is killed, whatever the
// syscall: i386 and x32 share nothing with the x86_64 numbers.
func TestFilterForeignArchKills(t *testing.T) {
	foreign := []uint32{
		0x40000003, // AUDIT_ARCH_I386 (int 0x80 on x86_64)
		0x40000028, // AUDIT_ARCH_ARM (AArch32 on arm64)
		0xc000003e, // AUDIT_ARCH_X86_64
		0xc00000b7, // AUDIT_ARCH_AARCH64
		0xc00000f3, // AUDIT_ARCH_RISCV64
		0,
		0xffffffff,
	}
	for _, arch := range testArches {
		cfg := Config{Arch: arch}
		raw, vm := filterVM(t, cfg)
		for _, a := range foreign {
			if a == arches[arch].audit {
				continue
			}
			for _, nr := range []uint32{0, 20, 39, 172, 0x40000027, 0xffffffff} {
				if got, _ := eval(t, raw, vm, seccompData{nr: nr, arch: a}); got != ActionKillProcess {
					t.Errorf("%s filter, arch %#x nr %d: %v, want kill_process", arch, a, nr, got)
				}
			}
		}
	}
}

// Every rule of the default profile is exercised by at least one denied
// case, and every argument rule by one with junk in the high word of an
// argument it checks; and no case names a rule that does not exist.
func TestTableCoversEveryRule(t *testing.T) {
	rules := map[string]rule{}
	for _, r := range profileRules(Config{}) {
		rules[r.Name] = r
	}
	hit := map[string]bool{}
	highHit := map[string]bool{}
	for _, c := range cases() {
		if c.rule == "" {
			if c.want != allow {
				t.Errorf("case %s expects %v but names no rule", c.name, c.want)
			}
			continue
		}
		r, ok := rules[c.rule]
		if !ok {
			t.Errorf("case %s names unknown rule %q", c.name, c.rule)
			continue
		}
		if c.want == allow {
			t.Errorf("case %s names rule %q but expects allow", c.name, c.rule)
		}
		hit[c.rule] = true
		for _, ch := range r.checks {
			if c.args[ch.arg]>>32 != 0 {
				highHit[c.rule] = true
			}
		}
	}
	hit["arch"] = true // TestFilterForeignArchKills
	for name, r := range rules {
		if !hit[name] {
			t.Errorf("rule %q has no test case", name)
		}
		if len(r.checks) > 0 && !highHit[name] {
			t.Errorf("argument rule %q has no case with high bits set in a checked argument", name)
		}
	}
}

func TestAllowNamespaceClone(t *testing.T) {
	def := DefaultProfile().Rules()
	cfg := Config{Arch: "amd64", AllowNamespaceClone: true}
	loose := NewProfile(cfg).Rules()
	if len(def)-len(loose) != 2 {
		t.Fatalf("AllowNamespaceClone removed %d rules, want 2", len(def)-len(loose))
	}
	for _, r := range loose {
		if r.Name == "clone-namespace" || r.Name == "unshare-namespace" {
			t.Fatalf("rule %s still present with AllowNamespaceClone", r.Name)
		}
	}
	raw, vm := filterVM(t, cfg)
	changed := 0
	for _, c := range cases() {
		nr, ok := c.nr("amd64")
		if !ok {
			continue
		}
		want := c.want
		if c.rule == "clone-namespace" || c.rule == "unshare-namespace" {
			want = allow
			changed++
		}
		if got, _ := eval(t, raw, vm, seccompData{nr: nr, arch: arches["amd64"].audit, args: c.args}); got != want.action(cfg) {
			t.Errorf("%s: %v, want %v", c.name, got, want.action(cfg))
		}
	}
	if changed < 10 {
		t.Fatalf("only %d namespace cases checked", changed)
	}
}

func TestDenyErrnoKnob(t *testing.T) {
	cfg := Config{Arch: "amd64", denyErrno: 4000}
	raw, vm := filterVM(t, cfg)
	ptrace := uint32(arches["amd64"].nr["ptrace"])
	if got, _ := eval(t, raw, vm, seccompData{nr: ptrace, arch: arches["amd64"].audit}); got != ActionErrno(4000) {
		t.Fatalf("ptrace with deny errno 4000: %v", got)
	}
	cfg.denyErrno = maxErrno + 1
	if _, err := Build(cfg); err == nil {
		t.Fatal("deny errno above MAX_ERRNO accepted")
	}
}

func TestBuildRejectsUnknownArch(t *testing.T) {
	_, err := Build(Config{Arch: "mips"})
	if err == nil || !strings.Contains(err.Error(), "Config.Arch") || !strings.Contains(err.Error(), "mips") {
		t.Fatalf("Build(mips) error = %v, want one naming Config.Arch and the value", err)
	}
}

func TestBuildIsDefaultProfile(t *testing.T) {
	a, err := Build(Config{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := DefaultProfile().Build()
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != len(b) {
		t.Fatalf("Build(Config{}) has %d instructions, DefaultProfile().Build() %d", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("instruction %d differs: %v vs %v", i, a[i], b[i])
		}
	}
}

// The program is well formed for the kernel: only word loads of
// seccomp_data, every path ends in a return, size within the limit; and
// the arch check comes before anything reads the syscall number.
func TestFilterShape(t *testing.T) {
	for _, arch := range testArches {
		raw, err := Build(Config{Arch: arch})
		if err != nil {
			t.Fatal(err)
		}
		if len(raw) > MaxInstructions || len(raw) < 20 {
			t.Fatalf("%s: %d instructions", arch, len(raw))
		}
		prog, _ := bpf.Disassemble(raw)
		if prog[0] != (bpf.LoadAbsolute{Off: offArch, Size: 4}) {
			t.Fatalf("%s: first instruction %v, want the arch load", arch, prog[0])
		}
		for i, ins := range prog {
			if la, ok := ins.(bpf.LoadAbsolute); ok && (la.Size != 4 || la.Off%4 != 0 || la.Off >= 64) {
				t.Errorf("%s: pc %d: %v is not a word load inside seccomp_data", arch, i, ins)
			}
		}
		if _, ok := prog[len(prog)-1].(bpf.RetConstant); !ok {
			t.Errorf("%s: last instruction %v is not a return", arch, prog[len(prog)-1])
		}
		t.Logf("%s: %d instructions", arch, len(raw))
	}
}

// The hot path: a syscall without rules returns ALLOW after a handful of
// instructions and reads nothing but arch and nr, which is what lets the
// kernel's action cache (Linux >= 5.11) skip the filter for it entirely.
func TestFastPathForCommonSyscalls(t *testing.T) {
	for _, arch := range testArches {
		raw, vm := filterVM(t, Config{Arch: arch})
		a := arches[arch]
		ruled := map[uint32]bool{}
		for _, r := range profileRules(Config{}) {
			if n, ok := a.nr[r.Syscall]; ok && n != absent {
				ruled[uint32(n)] = true
			}
		}
		maxSteps := 0
		for nr := uint32(0); nr < 512; nr++ {
			if ruled[nr] {
				continue
			}
			got, tr := eval(t, raw, vm, seccompData{nr: nr, arch: a.audit, args: [6]uint64{minus1, minus1, minus1, minus1, minus1, minus1}})
			if got != ActionAllow {
				t.Fatalf("%s: unruled syscall %d: %v", arch, nr, got)
			}
			for off := range tr.loads {
				if off != offNr && off != offArch {
					t.Errorf("%s: unruled syscall %d reads seccomp_data offset %d", arch, nr, off)
				}
			}
			maxSteps = max(maxSteps, tr.steps)
		}
		_, tr := eval(t, raw, vm, seccompData{nr: uint32(a.nr["read"]), arch: a.audit})
		t.Logf("%s: read executes %d instructions; the slowest unruled syscall %d", arch, tr.steps, maxSteps)
		if maxSteps > 16 {
			t.Errorf("%s: an unruled syscall takes %d instructions, want <= 16", arch, maxSteps)
		}
	}
}

func TestRulesDescription(t *testing.T) {
	p := DefaultProfile()
	rules := p.Rules()
	if p.Count() != len(rules) || p.Count() < 60 {
		t.Fatalf("Count %d, Rules %d", p.Count(), len(rules))
	}
	names := map[string]bool{}
	for _, r := range rules {
		if r.Name == "" || r.Syscall == "" || names[r.Name] {
			t.Errorf("bad or duplicate rule %+v", r)
		}
		names[r.Name] = true
	}
	for _, want := range []string{"arch", "x32", "clone3", "clone-namespace", "unshare-namespace", "socket-af-packet",
		"socket-netlink-non-route", "socket-raw", "socket-mptcp", "ioctl-tiocsti", "ptrace", "bpf", "io_uring_setup", "reboot", "mount_setattr"} {
		if !names[want] {
			t.Errorf("rule %q missing", want)
		}
	}
	for _, allowed := range []string{"memfd_create", "name_to_handle_at", "socketpair"} {
		if names[allowed] {
			t.Errorf("%s must stay allowed", allowed)
		}
	}
	b, err := json.Marshal(rules[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"action":"kill_process"`) || !strings.Contains(string(b), `"name":"arch"`) {
		t.Fatalf("rule JSON %s", b)
	}
	b, _ = json.Marshal(rules)
	if !strings.Contains(string(b), `"action":"errno(EPERM)"`) || !strings.Contains(string(b), `"action":"errno(ENOSYS)"`) {
		t.Fatalf("rules JSON lacks errno actions: %s", b)
	}
}

func TestActionString(t *testing.T) {
	for a, want := range map[Action]string{
		ActionAllow: "allow", ActionKillProcess: "kill_process", ActionErrno(EPERM): "errno(EPERM)",
		ActionErrno(ENOSYS): "errno(ENOSYS)", ActionErrno(4000): "errno(4000)", 0x7ff00000: "action(0x7ff00000)",
	} {
		if got := a.String(); got != want {
			t.Errorf("%#x.String() = %q, want %q", uint32(a), got, want)
		}
	}
	if e, ok := ActionErrno(EPERM).Errno(); !ok || e != EPERM {
		t.Errorf("Errno() = %d, %v", e, ok)
	}
	if _, ok := ActionAllow.Errno(); ok {
		t.Error("allow reported as an errno action")
	}
}

// The compiler against a direct reading of the rules: for arbitrary
// seccomp_data, both interpreters must return what the rule list says.
func FuzzFilter(f *testing.F) {
	for _, c := range cases()[:20] {
		nr, _ := c.nr("amd64")
		f.Add(nr, uint8(0), c.args[0], c.args[1], c.args[2], c.args[3])
	}
	f.Add(uint32(41), uint8(1), uint64(17), uint64(3), uint64(0), uint64(0))
	f.Add(uint32(198), uint8(1), uint64(0xffffffff00000011), uint64(3), uint64(0), uint64(0))
	f.Add(uint32(41), uint8(2), uint64(17), uint64(3), uint64(0), uint64(0))
	type built struct {
		raw []bpf.RawInstruction
		vm  *bpf.VM
	}
	filters := map[string]built{}
	for _, arch := range testArches {
		raw, vm := filterVM(f, Config{Arch: arch})
		filters[arch] = built{raw, vm}
	}
	f.Fuzz(func(t *testing.T, nr uint32, sel uint8, a0, a1, a2, a3 uint64) {
		arch := testArches[int(sel)%len(testArches)]
		audit := arches[arch].audit
		if sel&0x80 != 0 {
			audit = uint32(a3) // arbitrary arch value
		}
		d := seccompData{nr: nr, arch: audit, ip: a3, args: [6]uint64{a0, a1, a2, a3, a0 ^ a1, a2 ^ a3}}
		got, _ := eval(t, filters[arch].raw, filters[arch].vm, d)
		if want := reference(Config{}, arch, d); got != want {
			t.Fatalf("%s nr=%d arch=%#x args=%#x: filter %v, rules say %v", arch, nr, audit, d.args, got, want)
		}
	})
}

// reference applies the rule list to d directly, in Go.
func reference(cfg Config, arch string, d seccompData) Action {
	a := arches[arch]
	for _, r := range profileRules(cfg) {
		switch r.kind {
		case kindArch:
			if d.arch != a.audit {
				return r.Action
			}
		case kindX32:
			if a.x32 && d.nr&x32SyscallBit != 0 {
				return r.Action
			}
		default:
			if n := a.nr[r.Syscall]; n == absent || uint32(n) != d.nr {
				continue
			}
			match := true
			for _, c := range r.checks {
				v := uint32(d.args[c.arg]) // the kernel sees only the low word
				if c.mask != 0 {
					v &= c.mask
				}
				switch c.op {
				case opEq:
					match = match && v == c.val
				case opNe:
					match = match && v != c.val
				case opAnySet:
					match = match && v&c.val != 0
				}
			}
			if match {
				return r.Action
			}
		}
	}
	return ActionAllow
}

func BenchmarkFilterRead(b *testing.B) {
	raw, vm := filterVM(b, Config{Arch: "amd64"})
	d := seccompData{nr: uint32(arches["amd64"].nr["read"]), arch: arches["amd64"].audit, args: [6]uint64{3, 0x7fff0000, 4096}}
	in := d.vmBytes()
	tr, err := interpret(raw, d.kernelBytes())
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := vm.Run(in); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(tr.steps), "insns/op")
}

// The tree falls back to an unconditional jump when a left subtree is
// longer than a conditional jump can span. The default profile never
// needs it, so exercise it with a synthetic rule set of 200 syscalls.
func TestSearchTreeLongJumps(t *testing.T) {
	rules := map[uint32][]rule{}
	var nrs []uint32
	for nr := uint32(3); nr < 600; nr += 3 {
		nrs = append(nrs, nr)
		rules[nr] = []rule{{Rule: Rule{Name: "r", Action: ActionErrno(uint16(nr))},
			checks: []check{{arg: 1, op: opEq, val: nr}}}}
	}
	tree, err := searchTree(nrs, rules)
	if err != nil {
		t.Fatal(err)
	}
	prog := append([]bpf.Instruction{bpf.LoadAbsolute{Off: offNr, Size: 4}}, tree...)
	long := 0
	for _, ins := range prog {
		if _, ok := ins.(bpf.Jump); ok {
			long++
		}
	}
	if long == 0 {
		t.Fatal("no unconditional jump emitted; the test does not reach the fallback")
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		t.Fatal(err)
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatal(err)
	}
	for nr := uint32(0); nr < 610; nr++ {
		for _, arg := range []uint32{nr, nr + 1} {
			want := ActionAllow
			if nr%3 == 0 && nr >= 3 && nr < 600 && arg == nr {
				want = ActionErrno(uint16(nr))
			}
			if got, _ := eval(t, raw, vm, seccompData{nr: nr, args: [6]uint64{0, uint64(arg)}}); got != want {
				t.Fatalf("nr %d arg %d: %v, want %v", nr, arg, got, want)
			}
		}
	}
}
