//go:build linux

package attribution

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// sockDiag looks sockets up by their exact 4-tuple with a NETLINK_SOCK_DIAG
// socket created inside the sandbox's network namespace: the kernel
// answers from its hash table in O(1), where reading /proc/<pid>/net/tcp
// walks every bucket of the host-wide established hash (262,144 buckets,
// milliseconds, on a 24 GiB host).
//
// Creating the socket needs setns(2) into the namespace (CAP_SYS_ADMIN);
// without it the backend reads /proc/<pid>/net/tcp{,6} instead.
type sockDiag struct {
	mu     sync.Mutex
	fd     int    // -1: not open
	dev    uint64 // the namespace the socket lives in
	ino    uint64
	seq    uint32
	denied bool // setns was refused: do not try again
	// pinned: the socket was opened by open before the process gave up
	// CAP_SYS_ADMIN and could not be opened again, so a failed exchange
	// never closes it (a late answer is skipped by its sequence number).
	pinned  bool
	buf     []byte
	request [nlHdrLen + diagReqLen]byte
}

const (
	nlHdrLen      = 16
	diagReqLen    = 56 // struct inet_diag_req_v2
	diagMsgLen    = 72 // struct inet_diag_msg
	diagNoCookie  = ^uint32(0)
	diagAllStates = ^uint32(0)
)

// errDiagUnavailable: use the /proc tables.
var errDiagUnavailable = errors.New("sock_diag unavailable")

func newSockDiag() *sockDiag { return &sockDiag{fd: -1, buf: make([]byte, 8192)} }

func (d *sockDiag) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fd >= 0 {
		unix.Close(d.fd)
		d.fd = -1
	}
}

// open creates the socket in the namespace at nsPath now and pins it:
// lookups in that namespace keep using it after the process drops the
// capability that setns(2) needs.
func (d *sockDiag) open(nsPath string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var st unix.Stat_t
	if err := unix.Stat(nsPath, &st); err != nil {
		return err
	}
	if d.fd >= 0 {
		unix.Close(d.fd)
		d.fd = -1
	}
	fd, err := socketInNetns(nsPath)
	if err != nil {
		return err
	}
	d.fd, d.dev, d.ino, d.pinned, d.denied = fd, st.Dev, st.Ino, true, false
	return nil
}

// lookup returns the inode and socket cookie of the TCP socket client ->
// proxy in the namespace at nsPath. found reports a socket without a
// file (inode 0). errDiagUnavailable (wrapped) means: ask /proc instead.
func (d *sockDiag) lookup(nsPath string, client, proxy netip.AddrPort) (inode, cookie uint64, found bool, err error) {
	return d.lookupProto(nsPath, unix.IPPROTO_TCP, client, proxy)
}

// lookupProto is lookup for protocol proto (IPPROTO_TCP or IPPROTO_UDP).
func (d *sockDiag) lookupProto(nsPath string, proto uint8, client, proxy netip.AddrPort) (inode, cookie uint64, found bool, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.denied {
		return 0, 0, false, errDiagUnavailable
	}
	if d.pinned && d.fd >= 0 {
		// Pinned to the sandbox's namespace while it lived: the proxy
		// serves that one sandbox, whose namespace does not change
		// under it, and could not open a socket in another one anyway
		// (no CAP_SYS_ADMIN any more). Not stat'ing the namespace path
		// again saves a sixth of a lookup. Should the init die and its
		// pid be reused, queries miss and /proc decides.
		return d.query(proto, client, proxy)
	}
	var st unix.Stat_t
	if err := unix.Stat(nsPath, &st); err != nil {
		return 0, 0, false, err
	}
	if d.fd < 0 || st.Dev != d.dev || st.Ino != d.ino {
		if d.fd >= 0 {
			unix.Close(d.fd)
			d.fd, d.pinned = -1, false
		}
		fd, err := socketInNetns(nsPath)
		if err != nil {
			if errors.Is(err, unix.EPERM) {
				d.denied = true
			}
			return 0, 0, false, fmt.Errorf("%w: %v", errDiagUnavailable, err)
		}
		d.fd, d.dev, d.ino = fd, st.Dev, st.Ino
	}
	return d.query(proto, client, proxy)
}

// socketInNetns creates a NETLINK_SOCK_DIAG socket in the namespace at
// nsPath, from a locked thread that enters it and comes back. A thread
// that cannot come back stays locked and dies with its goroutine.
func socketInNetns(nsPath string) (int, error) {
	type res struct {
		fd  int
		err error
	}
	rc := make(chan res, 1)
	go func() {
		runtime.LockOSThread()
		target, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			rc <- res{-1, err}
			return
		}
		defer unix.Close(target)
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			rc <- res{-1, err}
			return
		}
		defer unix.Close(orig)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			rc <- res{-1, fmt.Errorf("setns %s: %w", nsPath, err)}
			return
		}
		fd, serr := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
		if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
			if serr == nil {
				unix.Close(fd)
			}
			rc <- res{-1, fmt.Errorf("return from %s: %w", nsPath, err)} // thread stays locked
			return
		}
		runtime.UnlockOSThread()
		if serr != nil {
			rc <- res{-1, fmt.Errorf("sock_diag socket: %w", serr)}
			return
		}
		// A lookup never waits long for the kernel.
		tv := unix.Timeval{Sec: 1}
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			unix.Close(fd)
			rc <- res{-1, err}
			return
		}
		rc <- res{fd, nil}
	}()
	r := <-rc
	return r.fd, r.err
}

// query sends one exact-match SOCK_DIAG_BY_FAMILY request for protocol
// proto. For UDP the kernel looks the socket up as the receiver of a
// datagram from idiag_src to idiag_dst (udp_dump_one: "src and dst are
// swapped for historical reasons"), so the socket's own address goes in
// idiag_dst; a socket bound but not connected matches too.
func (d *sockDiag) query(proto uint8, client, proxy netip.AddrPort) (inode, cookie uint64, found bool, err error) {
	d.seq++
	req := d.request[:]
	clear(req)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(req[8:], d.seq)
	r := req[nlHdrLen:]
	// An AF_INET request also finds dual-stack AF_INET6 sockets with
	// IPv4-mapped addresses: both live in the IPv4 hash.
	if client.Addr().Is4() {
		r[0] = unix.AF_INET
	} else {
		r[0] = unix.AF_INET6
	}
	r[1] = proto
	ne.PutUint32(r[4:], diagAllStates)
	id := r[8:]
	local, remote := client, proxy
	if proto == unix.IPPROTO_UDP {
		local, remote = proxy, client
	}
	binary.BigEndian.PutUint16(id[0:], local.Port()) // idiag_sport: the socket's local port (TCP)
	binary.BigEndian.PutUint16(id[2:], remote.Port())
	putDiagAddr(id[4:20], local.Addr())
	putDiagAddr(id[20:36], remote.Addr())
	// id[36:40] idiag_if = 0: any interface.
	ne.PutUint32(id[40:], diagNoCookie)
	ne.PutUint32(id[44:], diagNoCookie)

	if err = unix.Sendto(d.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, 0, false, d.broken(err)
	}
	for {
		n, _, err := unix.Recvfrom(d.fd, d.buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, 0, false, d.broken(err)
		}
		msgs := d.buf[:n]
		for len(msgs) >= nlHdrLen {
			l := int(ne.Uint32(msgs[0:]))
			if l < nlHdrLen || l > len(msgs) {
				return 0, 0, false, d.broken(errors.New("truncated netlink message"))
			}
			typ, seq, body := ne.Uint16(msgs[4:]), ne.Uint32(msgs[8:]), msgs[nlHdrLen:l]
			msgs = msgs[min(nlAlign(l), len(msgs)):]
			if seq != d.seq {
				continue // a late answer to an abandoned request
			}
			switch typ {
			case unix.NLMSG_ERROR:
				if len(body) < 4 {
					return 0, 0, false, d.broken(errors.New("short netlink error"))
				}
				errno := -int32(ne.Uint32(body))
				if errno == int32(unix.ENOENT) {
					return 0, 0, false, nil
				}
				return 0, 0, false, fmt.Errorf("%w: %v", errDiagUnavailable, unix.Errno(errno))
			case unix.SOCK_DIAG_BY_FAMILY:
				if len(body) < diagMsgLen {
					return 0, 0, false, d.broken(errors.New("short inet_diag_msg"))
				}
				// inet_diag_msg: idiag_cookie[2] at 44 (low word
				// first), idiag_inode at 68.
				cookie := uint64(ne.Uint32(body[44:])) | uint64(ne.Uint32(body[48:]))<<32
				return uint64(ne.Uint32(body[68:])), cookie, true, nil
			}
		}
	}
}

// broken closes a socket that failed, so the next lookup opens a new one,
// unless it is pinned: then it could not be reopened, and it stays.
func (d *sockDiag) broken(err error) error {
	if !d.pinned {
		unix.Close(d.fd)
		d.fd = -1
	}
	return fmt.Errorf("%w: %v", errDiagUnavailable, err)
}

func nlAlign(n int) int { return (n + 3) &^ 3 }

// putDiagAddr writes a into a 16-byte idiag_src/idiag_dst: IPv4 in the
// first 4 bytes, IPv6 in all 16, network order.
func putDiagAddr(dst []byte, a netip.Addr) {
	if a.Is4() {
		b := a.As4()
		copy(dst, b[:])
		return
	}
	b := a.As16()
	copy(dst, b[:])
}

// diagNsPath is where the network namespace of pid is.
func diagNsPath(procRoot string, pid int) string {
	return procRoot + "/" + strconv.Itoa(pid) + "/ns/net"
}
