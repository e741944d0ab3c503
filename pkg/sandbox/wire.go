package sandbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"

	"golang.org/x/net/bpf"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/palisade-sandbox/palisade/pkg/landlock"
)

// The control socket carries Messages in a small hand-written binary form
// rather than JSON. Decoding JSON into the OCI spec costs 1 to 2.5 ms the
// first time in a process (encoding/json builds its per-type decoders by
// reflection), and the init is always a fresh process with that cost on
// the critical path of every sandbox start; this codec costs a few
// microseconds. The same form is kept in the sandbox's state directory
// (ConfigFile), for inspection and for a later exec.
//
// Layout: a magic byte and version, then the fields in a fixed order.
// Integers are little-endian uvarints (zig-zag varints when signed),
// strings and lists are length-prefixed, optional parts have a presence
// byte. Both ends are the same binary, so there is no negotiation; a
// mismatch (a different build as init) is a clear error. The decoder
// checks every length against the bytes left and never panics
// (FuzzDecodeMessage).
//
// What it covers: every field BuildSpec sets, checked by a test that
// round-trips specs through the codec and compares their JSON, so a field
// added to BuildSpec cannot silently get lost on the way to the init.

const (
	wireMagic   = 0xB5
	wireVersion = 1
)

// wire limits, far above what a sandbox uses, so a corrupt length cannot
// make the decoder allocate much.
const (
	wireMaxList   = 1 << 16
	wireMaxString = 1 << 20 // the channel's largest datagram
)

var errWireShort = errors.New("truncated")

type wenc struct{ b []byte }

func (w *wenc) u(v uint64) { w.b = binary.AppendUvarint(w.b, v) }
func (w *wenc) i(v int64)  { w.b = binary.AppendVarint(w.b, v) }
func (w *wenc) flag(v bool) {
	if v {
		w.b = append(w.b, 1)
	} else {
		w.b = append(w.b, 0)
	}
}
func (w *wenc) str(s string) { w.u(uint64(len(s))); w.b = append(w.b, s...) }

// strs keeps nil and empty apart: the spec's capability sets are empty
// lists, not absent ones.
func (w *wenc) strs(l []string) {
	if l == nil {
		w.u(0)
		return
	}
	w.u(uint64(len(l)) + 1)
	for _, s := range l {
		w.str(s)
	}
}

// opt writes the presence byte of an optional part and reports whether
// it is present.
func (w *wenc) opt(present bool) bool { w.flag(present); return present }

type wdec struct {
	b   []byte
	err error
}

func (r *wdec) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *wdec) u() uint64 { return readVarint(r, binary.Uvarint) }
func (r *wdec) i() int64  { return readVarint(r, binary.Varint) }

// readVarint reads one varint with read (binary.Uvarint or Varint).
func readVarint[T uint64 | int64](r *wdec, read func([]byte) (T, int)) T {
	if r.err != nil {
		return 0
	}
	v, n := read(r.b)
	if n <= 0 {
		r.fail(errWireShort)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *wdec) u32() uint32 {
	v := r.u()
	if v > math.MaxUint32 {
		r.fail(fmt.Errorf("value %d out of range", v))
		return 0
	}
	return uint32(v)
}

func (r *wdec) int() int {
	v := r.i()
	if v > math.MaxInt32 || v < math.MinInt32 {
		r.fail(fmt.Errorf("value %d out of range", v))
		return 0
	}
	return int(v)
}

func (r *wdec) flag() bool {
	if r.err != nil {
		return false
	}
	if len(r.b) == 0 {
		r.fail(errWireShort)
		return false
	}
	v := r.b[0]
	r.b = r.b[1:]
	if v > 1 {
		r.fail(fmt.Errorf("bad flag byte %d", v))
		return false
	}
	return v == 1
}

func (r *wdec) str() string {
	n := r.u()
	if r.err != nil {
		return ""
	}
	if n > wireMaxString || n > uint64(len(r.b)) {
		r.fail(errWireShort)
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// count reads a list length (stored plus one for a present list when
// nilable) and bounds it by the bytes left: every element takes at least
// one byte.
func (r *wdec) count(nilable bool) (n int, isNil bool) {
	v := r.u()
	if r.err != nil {
		return 0, true
	}
	if nilable {
		if v == 0 {
			return 0, true
		}
		v--
	}
	if v > wireMaxList || v > uint64(len(r.b)) {
		r.fail(fmt.Errorf("list of %d elements exceeds the message", v))
		return 0, true
	}
	return int(v), false
}

func (r *wdec) strs() []string {
	n, isNil := r.count(true)
	if isNil {
		return nil
	}
	l := make([]string, n)
	for k := range l {
		l[k] = r.str()
	}
	return l
}

func (r *wdec) opt() bool { return r.flag() }

// encodeMessage returns m in wire form.
func encodeMessage(m Message) []byte {
	w := &wenc{b: make([]byte, 0, 512)}
	w.b = append(w.b, wireMagic, wireVersion)
	w.str(m.Type)
	w.u(uint64(m.PID))
	w.i(int64(m.Code))
	w.i(int64(m.Signal))
	w.str(m.Stage)
	w.str(m.Msg)
	w.str(m.Level)
	if w.opt(m.Config != nil) {
		encodeConfig(w, m.Config)
	}
	if w.opt(m.Confinement != nil) {
		encodeConfinement(w, m.Confinement)
	}
	if w.opt(m.Exec != nil) {
		e := m.Exec
		w.strs(e.Args)
		w.strs(e.Env)
		w.str(e.Workdir)
		w.flag(e.LoginShell)
		w.flag(e.Terminal)
		w.i(int64(e.Rows))
		w.i(int64(e.Cols))
	}
	return w.b
}

// decodeMessage parses the wire form of one Message.
func decodeMessage(b []byte) (Message, error) {
	if len(b) < 2 || b[0] != wireMagic {
		return Message{}, errors.New("not a palisade control message")
	}
	if b[1] != wireVersion {
		return Message{}, fmt.Errorf("control message version %d, this binary speaks %d (init and supervisor from different builds?)", b[1], wireVersion)
	}
	r := &wdec{b: b[2:]}
	var m Message
	m.Type = r.str()
	pid := r.u()
	if pid > math.MaxInt32 {
		r.fail(fmt.Errorf("pid %d out of range", pid))
	}
	m.PID = int(pid)
	m.Code = r.int()
	m.Signal = r.int()
	m.Stage = r.str()
	m.Msg = r.str()
	m.Level = r.str()
	if r.opt() {
		m.Config = decodeConfig(r)
	}
	if r.opt() {
		m.Confinement = decodeConfinement(r)
	}
	if r.opt() {
		m.Exec = &ExecRequest{Args: r.strs(), Env: r.strs(), Workdir: r.str(), LoginShell: r.flag(), Terminal: r.flag(), Rows: r.int(), Cols: r.int()}
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail(fmt.Errorf("%d trailing bytes", len(r.b)))
	}
	if r.err != nil {
		return Message{}, fmt.Errorf("bad %q message: %w", m.Type, r.err)
	}
	return m, nil
}

func encodeConfig(w *wenc, c *InitConfig) {
	w.flag(c.Seccomp)
	w.flag(c.Timing)
	w.str(c.StorageCheck)
	w.i(int64(c.SeccompRules))
	w.u(uint64(len(c.SeccompFilter)))
	for _, ins := range c.SeccompFilter {
		w.u(uint64(ins.Op))
		w.u(uint64(ins.Jt))
		w.u(uint64(ins.Jf))
		w.u(uint64(ins.K))
	}
	if w.opt(c.Landlock != nil) {
		w.strs(c.Landlock.ReadOnly)
		w.strs(c.Landlock.ReadWrite)
		w.flag(c.Landlock.HardRequirement)
	}
	if w.opt(c.Spec != nil) {
		encodeSpec(w, c.Spec)
	}
}

func decodeConfig(r *wdec) *InitConfig {
	c := &InitConfig{}
	c.Seccomp = r.flag()
	c.Timing = r.flag()
	c.StorageCheck = r.str()
	c.SeccompRules = r.int()
	if n, _ := r.count(false); n > 0 {
		c.SeccompFilter = make([]bpf.RawInstruction, n)
		for k := range c.SeccompFilter {
			op, jt, jf, kk := r.u(), r.u(), r.u(), r.u32()
			if op > math.MaxUint16 || jt > math.MaxUint8 || jf > math.MaxUint8 {
				r.fail(fmt.Errorf("seccomp instruction %d out of range", k))
			}
			c.SeccompFilter[k] = bpf.RawInstruction{Op: uint16(op), Jt: uint8(jt), Jf: uint8(jf), K: kk}
		}
	}
	if r.opt() {
		c.Landlock = &landlock.Rules{ReadOnly: r.strs(), ReadWrite: r.strs(), HardRequirement: r.flag()}
	}
	if r.opt() {
		c.Spec = decodeSpec(r)
	}
	return c
}

func encodeConfinement(w *wenc, c *Confinement) {
	l := c.Landlock
	w.i(int64(l.ABI))
	w.i(int64(l.ReadOnly))
	w.i(int64(l.ReadWrite))
	w.str(l.Scopes)
	w.str(l.Handled)
	w.str(l.Logging)
	w.flag(l.Enforced)
	w.u(uint64(len(l.Skipped)))
	for _, s := range l.Skipped {
		w.str(s.Path)
		w.str(s.Access)
		w.str(s.Reason)
	}
	w.flag(c.Seccomp)
	w.i(int64(c.SeccompRules))
	w.strs(c.Namespaces)
	w.u(uint64(c.UID))
	w.u(uint64(c.GID))
	w.i(int64(c.Mounts))
}

func decodeConfinement(r *wdec) *Confinement {
	c := &Confinement{}
	l := &c.Landlock
	l.ABI = r.int()
	l.ReadOnly = r.int()
	l.ReadWrite = r.int()
	l.Scopes = r.str()
	l.Handled = r.str()
	l.Logging = r.str()
	l.Enforced = r.flag()
	if n, _ := r.count(false); n > 0 {
		l.Skipped = make([]landlock.Skip, n)
		for k := range l.Skipped {
			l.Skipped[k] = landlock.Skip{Path: r.str(), Access: r.str(), Reason: r.str()}
		}
	}
	c.Seccomp = r.flag()
	c.SeccompRules = r.int()
	c.Namespaces = r.strs()
	c.UID = r.u32()
	c.GID = r.u32()
	c.Mounts = r.int()
	return c
}

// optional scalars of the spec: a presence byte, then the value.

func putOpt[T any](w *wenc, p *T, put func(T)) {
	if w.opt(p != nil) {
		put(*p)
	}
}

func getOpt[T any](r *wdec, get func() T) *T {
	if !r.opt() {
		return nil
	}
	v := get()
	return &v
}

func (w *wenc) u32(v uint32) { w.u(uint64(v)) }

func encodeSpec(w *wenc, s *specs.Spec) {
	w.str(s.Version)
	w.str(s.Hostname)
	if w.opt(s.Root != nil) {
		w.str(s.Root.Path)
		w.flag(s.Root.Readonly)
	}
	if w.opt(s.Process != nil) {
		p := s.Process
		w.flag(p.Terminal)
		if w.opt(p.ConsoleSize != nil) {
			w.u(uint64(p.ConsoleSize.Height))
			w.u(uint64(p.ConsoleSize.Width))
		}
		w.u(uint64(p.User.UID))
		w.u(uint64(p.User.GID))
		w.u(uint64(len(p.User.AdditionalGids)))
		for _, g := range p.User.AdditionalGids {
			w.u(uint64(g))
		}
		putOpt(w, p.User.Umask, w.u32)
		w.str(p.User.Username)
		w.strs(p.Args)
		w.strs(p.Env)
		w.str(p.Cwd)
		w.flag(p.NoNewPrivileges)
		if w.opt(p.Capabilities != nil) {
			c := p.Capabilities
			w.strs(c.Bounding)
			w.strs(c.Effective)
			w.strs(c.Inheritable)
			w.strs(c.Permitted)
			w.strs(c.Ambient)
		}
		w.u(uint64(len(p.Rlimits)))
		for _, rl := range p.Rlimits {
			w.str(rl.Type)
			w.u(rl.Hard)
			w.u(rl.Soft)
		}
	}
	w.u(uint64(len(s.Mounts)))
	for _, m := range s.Mounts {
		w.str(m.Destination)
		w.str(m.Type)
		w.str(m.Source)
		w.strs(m.Options)
	}
	keys := make([]string, 0, len(s.Annotations))
	for k := range s.Annotations {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	w.flag(s.Annotations != nil)
	w.u(uint64(len(keys)))
	for _, k := range keys {
		w.str(k)
		w.str(s.Annotations[k])
	}
	if w.opt(s.Linux != nil) {
		l := s.Linux
		w.u(uint64(len(l.Namespaces)))
		for _, ns := range l.Namespaces {
			w.str(string(ns.Type))
			w.str(ns.Path)
		}
		w.str(l.CgroupsPath)
		if w.opt(l.Resources != nil) {
			res := l.Resources
			if w.opt(res.Pids != nil) {
				putOpt(w, res.Pids.Limit, w.i)
			}
			if w.opt(res.Memory != nil) {
				putOpt(w, res.Memory.Limit, w.i)
				putOpt(w, res.Memory.Swap, w.i)
			}
			if w.opt(res.CPU != nil) {
				putOpt(w, res.CPU.Quota, w.i)
				putOpt(w, res.CPU.Period, w.u)
			}
		}
		w.u(uint64(len(l.Devices)))
		for _, d := range l.Devices {
			w.str(d.Path)
			w.str(d.Type)
			w.i(d.Major)
			w.i(d.Minor)
			if w.opt(d.FileMode != nil) {
				w.u(uint64(*d.FileMode))
			}
			putOpt(w, d.UID, w.u32)
			putOpt(w, d.GID, w.u32)
		}
		w.strs(l.MaskedPaths)
		w.strs(l.ReadonlyPaths)
	}
}

func decodeSpec(r *wdec) *specs.Spec {
	s := &specs.Spec{}
	s.Version = r.str()
	s.Hostname = r.str()
	if r.opt() {
		s.Root = &specs.Root{Path: r.str(), Readonly: r.flag()}
	}
	if r.opt() {
		p := &specs.Process{}
		s.Process = p
		p.Terminal = r.flag()
		if r.opt() {
			h, wd := r.u(), r.u()
			p.ConsoleSize = &specs.Box{Height: uint(h), Width: uint(wd)}
		}
		p.User.UID = r.u32()
		p.User.GID = r.u32()
		if n, _ := r.count(false); n > 0 {
			p.User.AdditionalGids = make([]uint32, n)
			for k := range p.User.AdditionalGids {
				p.User.AdditionalGids[k] = r.u32()
			}
		}
		p.User.Umask = getOpt(r, r.u32)
		p.User.Username = r.str()
		p.Args = r.strs()
		p.Env = r.strs()
		p.Cwd = r.str()
		p.NoNewPrivileges = r.flag()
		if r.opt() {
			p.Capabilities = &specs.LinuxCapabilities{
				Bounding: r.strs(), Effective: r.strs(), Inheritable: r.strs(),
				Permitted: r.strs(), Ambient: r.strs(),
			}
		}
		if n, _ := r.count(false); n > 0 {
			p.Rlimits = make([]specs.POSIXRlimit, n)
			for k := range p.Rlimits {
				p.Rlimits[k] = specs.POSIXRlimit{Type: r.str(), Hard: r.u(), Soft: r.u()}
			}
		}
	}
	if n, _ := r.count(false); n > 0 {
		s.Mounts = make([]specs.Mount, n)
		for k := range s.Mounts {
			s.Mounts[k] = specs.Mount{Destination: r.str(), Type: r.str(), Source: r.str(), Options: r.strs()}
		}
	}
	hasAnn := r.flag()
	n, _ := r.count(false)
	if hasAnn {
		s.Annotations = make(map[string]string, n)
	}
	for range n {
		k, v := r.str(), r.str()
		if s.Annotations != nil {
			s.Annotations[k] = v
		}
	}
	if r.opt() {
		l := &specs.Linux{}
		s.Linux = l
		if n, _ := r.count(false); n > 0 {
			l.Namespaces = make([]specs.LinuxNamespace, n)
			for k := range l.Namespaces {
				l.Namespaces[k] = specs.LinuxNamespace{Type: specs.LinuxNamespaceType(r.str()), Path: r.str()}
			}
		}
		l.CgroupsPath = r.str()
		if r.opt() {
			res := &specs.LinuxResources{}
			l.Resources = res
			if r.opt() {
				res.Pids = &specs.LinuxPids{Limit: getOpt(r, r.i)}
			}
			if r.opt() {
				res.Memory = &specs.LinuxMemory{Limit: getOpt(r, r.i), Swap: getOpt(r, r.i)}
			}
			if r.opt() {
				res.CPU = &specs.LinuxCPU{Quota: getOpt(r, r.i), Period: getOpt(r, r.u)}
			}
		}
		if n, _ := r.count(false); n > 0 {
			l.Devices = make([]specs.LinuxDevice, n)
			for k := range l.Devices {
				d := &l.Devices[k]
				d.Path = r.str()
				d.Type = r.str()
				d.Major = r.i()
				d.Minor = r.i()
				if r.opt() {
					m := os.FileMode(r.u32())
					d.FileMode = &m
				}
				d.UID = getOpt(r, r.u32)
				d.GID = getOpt(r, r.u32)
			}
		}
		l.MaskedPaths = r.strs()
		l.ReadonlyPaths = r.strs()
	}
	return s
}

// EncodeConfig returns cfg in the form ConfigFile holds.
func EncodeConfig(cfg *InitConfig) []byte {
	return encodeMessage(Message{Type: MsgConfig, Config: cfg})
}

// DecodeConfig parses what EncodeConfig wrote.
func DecodeConfig(b []byte) (*InitConfig, error) {
	m, err := decodeMessage(b)
	if err != nil {
		return nil, err
	}
	if m.Type != MsgConfig || m.Config == nil {
		return nil, fmt.Errorf("not a sandbox configuration (message %q)", m.Type)
	}
	return m.Config, nil
}
