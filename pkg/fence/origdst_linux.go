//go:build linux

package fence

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// soOriginalDst is SO_ORIGINAL_DST (linux/netfilter_ipv4.h) and
// IP6T_SO_ORIGINAL_DST (linux/netfilter_ipv6/ip6_tables.h); both are 80.
const soOriginalDst = 80

// OriginalDst returns the destination a redirected TCP connection was
// addressed to before the fence's NAT rule sent it to the fence
// listener, read from conntrack with getsockopt(SO_ORIGINAL_DST) (or
// IP6T_SO_ORIGINAL_DST for IPv6 sockets). For a connection that was not
// NATed it is the connection's own local address; when conntrack has no
// entry the error wraps ENOENT.
func OriginalDst(conn *net.TCPConn) (netip.AddrPort, error) {
	local, ok := conn.LocalAddr().(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("fence: original destination: local address %v is not TCP", conn.LocalAddr())
	}
	v4 := local.IP.To4() != nil
	rc, err := conn.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("fence: original destination: %w", err)
	}
	var (
		ap   netip.AddrPort
		serr error
	)
	cerr := rc.Control(func(fd uintptr) {
		if v4 {
			var sa unix.RawSockaddrInet4
			if serr = getsockopt(int(fd), unix.SOL_IP, unsafe.Pointer(&sa), unsafe.Sizeof(sa)); serr == nil {
				ap = netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), ntohs(sa.Port))
			}
			return
		}
		var sa unix.RawSockaddrInet6
		if serr = getsockopt(int(fd), unix.SOL_IPV6, unsafe.Pointer(&sa), unsafe.Sizeof(sa)); serr == nil {
			ap = netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), ntohs(sa.Port))
		}
	})
	if cerr != nil {
		return netip.AddrPort{}, fmt.Errorf("fence: original destination: %w", cerr)
	}
	if serr != nil {
		return netip.AddrPort{}, fmt.Errorf("fence: original destination: getsockopt SO_ORIGINAL_DST: %w", serr)
	}
	return ap, nil
}

func getsockopt(fd, level int, p unsafe.Pointer, size uintptr) error {
	l := uint32(size)
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), soOriginalDst,
		uintptr(p), uintptr(unsafe.Pointer(&l)), 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// ntohs reads a port stored in network byte order in a raw sockaddr.
func ntohs(p uint16) uint16 {
	var b [2]byte
	binary.NativeEndian.PutUint16(b[:], p)
	return binary.BigEndian.Uint16(b[:])
}
