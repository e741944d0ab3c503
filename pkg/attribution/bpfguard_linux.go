//go:build linux

package attribution

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	palisadebpf "github.com/palisade-sandbox/palisade/bpf"
)

// ErrNoGuard: the connection cannot be held to its decided process
// after the decision (the guard is not attached, or this socket is not
// under it: connected before the programs were attached, the guarded
// map was full, or it was disconnected and connected again).
var ErrNoGuard = errors.New("attribution: the send guard does not hold this connection")

// SendViolation is a send the kernel refused on a guarded connection: a
// process that is neither the decided one nor its descendant tried to
// send bytes on it.
type SendViolation struct {
	// PID is the sender's host tgid, Thread the sending thread.
	PID, Thread int
	// Exe is the sender's /proc/<pid>/exe ("" when it is gone; Comm and
	// the executable's device and inode then name it).
	Exe  string
	Comm string
	// ExeDev (kernel encoding) and ExeIno name the sender's executable.
	ExeDev uint32
	ExeIno uint64
	// Code is set when the sender is the decided process (or its
	// descendant) but has mapped foreign code since the decision, which
	// was made on clean code: it lost its binary's identity.
	Code *ForeignCode
}

// sendGuard is the eBPF backend's send guard: the send_guard sk_msg
// program on the guarded sockhash (bpf/attr.c), the decided map the
// proxy fills, and the reader of the violations ring.
type sendGuard struct {
	on     bool
	reader *ringbuf.Reader
	done   chan struct{}

	mu    sync.Mutex
	calls map[uint64]func(SendViolation) // by cookie
}

// attachGuard attaches send_guard to the guarded sockhash (before the
// cgroup programs that add sockets to it) and turns insertion on. A
// kernel that refused the program leaves the guard off (GuardActive
// says why); the backend works without it. With off, neither: a socket
// in the sockhash takes the sk_msg send path (a copy into the message
// and the verdict on every send) and a psock set up and torn down with
// it, whether or not anything is ever bound to it.
func (b *BPFBackend) attachGuard(off bool) error {
	b.guard.calls = map[uint64]func(SendViolation){}
	if off {
		b.guardErr = errors.New("turned off (BPFConfig.NoSendGuard)")
		return nil
	}
	p := b.objs.opt["send_guard"]
	if p == nil {
		b.guardErr = fmt.Errorf("send_guard not loaded: %v", b.skipped["guard"])
		return nil
	}
	if err := link.RawAttachProgram(link.RawAttachProgramOptions{Target: b.objs.Guarded.FD(), Program: p, Attach: ebpf.AttachSkMsgVerdict}); err != nil {
		b.guardErr = fmt.Errorf("attach send_guard to the guarded sockhash: %w", err)
		return nil
	}
	rd, err := ringbuf.NewReader(b.objs.Violations)
	if err != nil {
		return fmt.Errorf("attribution: bpf: violations ring: %w", err)
	}
	if err := b.objs.GuardOn.Put(uint32(0), uint32(1)); err != nil {
		rd.Close()
		return fmt.Errorf("attribution: bpf: guard_on: %w", err)
	}
	b.guard.on, b.guard.reader, b.guard.done = true, rd, make(chan struct{})
	go b.readViolations()
	return nil
}

// closeGuard stops the violations reader.
func (b *BPFBackend) closeGuard() {
	if b.guard.reader != nil {
		b.guard.reader.Close()
		<-b.guard.done
	}
}

// GuardActive reports whether the send guard holds decided connections
// on this kernel, and why not.
func (b *BPFBackend) GuardActive() (bool, error) { return b.guard.on, b.guardErr }

// Guard holds the connection id was attributed from to id's process:
// from now on only it and its descendants may send bytes on the
// connection's socket; any other sender is refused (EACCES) by the
// kernel, the connection refuses every later send, and onViolation is
// called with the sender (from the reader's goroutine). The returned
// function releases the binding (when the connection ends).
func (b *BPFBackend) Guard(id *Identity, onViolation func(SendViolation)) (func(), error) {
	if !b.guard.on {
		return nil, fmt.Errorf("%w: %v", ErrNoGuard, b.guardErr)
	}
	if id == nil || id.cookie == 0 || id.start == 0 || id.PID <= 0 {
		return nil, fmt.Errorf("%w: the socket or its process is not known to the process tree", ErrNoGuard)
	}
	b.guard.mu.Lock()
	b.guard.calls[id.cookie] = onViolation
	b.guard.mu.Unlock()
	d := palisadebpf.AttrDecidedInfo{Tgid: uint32(id.PID), StartTime: id.start}
	if id.Code == nil {
		d.Flags = decidedClean
	}
	// sock_ops put a placeholder under the cookie when the socket
	// joined the guarded sockhash (bpf/attr.c): the binding replaces it
	// and fails without it, so a socket not under the guard is never
	// bound, at no system call more than the binding.
	if err := b.objs.Decided.Update(id.cookie, &d, ebpf.UpdateExist); err != nil {
		b.dropGuard(id.cookie)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil, fmt.Errorf("%w: socket %d is not under it", ErrNoGuard, id.cookie)
		}
		return nil, fmt.Errorf("%w: decided map: %v", ErrNoGuard, err)
	}
	cookie := id.cookie
	return func() {
		forgetDecided(b.objs.Decided, cookie)
		b.dropGuard(cookie)
	}, nil
}

// mapElemAttr is the kernel's union bpf_attr for the BPF_MAP_*_ELEM
// commands (include/uapi/linux/bpf.h).
type mapElemAttr struct {
	mapFD uint32
	_     uint32
	key   unsafe.Pointer
	value unsafe.Pointer
	flags uint64
}

// forgetDecided deletes cookie's entry from the decided map, whether or
// not it is still there. It usually is not: sock_ops deletes it when the
// socket closes (bpf/attr.c), before the proxy releases the connection,
// and cilium/ebpf's Map.Delete answers a missing key with an error it
// formats (fmt.Errorf and errors.Is: about 2 µs of the proxy's CPU per
// connection in perf profiles of BenchmarkSandboxConnectRate). The
// system call alone, BenchmarkForgetDecided's "raw" against "cilium"
// (Map.Delete), per missing key: 0.84 µs against 3.3 µs (medians of 5,
// load average 15), 0.25x.
func forgetDecided(m *ebpf.Map, cookie uint64) {
	attr := mapElemAttr{mapFD: uint32(m.FD()), key: unsafe.Pointer(&cookie)}
	syscall.Syscall(unix.SYS_BPF, unix.BPF_MAP_DELETE_ELEM, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	runtime.KeepAlive(&attr)
	runtime.KeepAlive(&cookie)
}

func (b *BPFBackend) dropGuard(cookie uint64) {
	b.guard.mu.Lock()
	delete(b.guard.calls, cookie)
	b.guard.mu.Unlock()
}

// readViolations delivers each refused send to its connection's
// callback until the ring is closed.
func (b *BPFBackend) readViolations() {
	defer close(b.guard.done)
	var v palisadebpf.AttrViolation
	for {
		rec, err := b.guard.reader.Read()
		if err != nil {
			return // closed
		}
		if len(rec.RawSample) < int(unsafe.Sizeof(v)) {
			continue
		}
		if _, err := binary.Decode(rec.RawSample, binary.NativeEndian, &v); err != nil {
			continue
		}
		b.guardViolations.Add(1)
		b.guard.mu.Lock()
		call := b.guard.calls[v.Cookie]
		b.guard.mu.Unlock()
		if call != nil {
			call(b.violationOf(&v))
		}
	}
}

// bpf/attr.c's DECIDED_CLEAN and VIOLATION_CODE.
const (
	decidedClean  = 2
	violationCode = 2
)

// violationOf names the sender of a refused send.
func (b *BPFBackend) violationOf(v *palisadebpf.AttrViolation) SendViolation {
	sv := SendViolation{PID: int(v.Tgid), Thread: int(v.Pid), ExeDev: v.ExeDev, ExeIno: v.ExeIno, Comm: cString(v.Comm[:])}
	if v.Why == violationCode {
		sv.Code = &ForeignCode{Reasons: codeReasons(v.Code)}
		var e palisadebpf.AttrProcInfo
		if b.objs.Procs.Lookup(v.Tgid, &e) == nil && e.CodeIno != 0 {
			sv.Code.File = nameMapped(b.proc.cfg.ProcRoot, sv.PID, e.CodeDev, e.CodeIno)
		}
	}
	var st unix.Stat_t
	path := b.proc.cfg.ProcRoot + "/" + strconv.Itoa(sv.PID) + "/exe"
	if exe, err := os.Readlink(path); err == nil && unix.Stat(path, &st) == nil && st.Ino == v.ExeIno && kernelDev(st.Dev) == v.ExeDev {
		sv.Exe = exe
	}
	return sv
}

// cString is a NUL-terminated C string.
func cString(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}
