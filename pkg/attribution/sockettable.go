package attribution

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
)

// sockEntry is one row of /proc/<pid>/net/tcp or tcp6.
type sockEntry struct {
	Local, Remote netip.AddrPort // IPv4-mapped addresses unmapped
	State         uint8          // TCP_ESTABLISHED = 1, ... TCP_LISTEN = 10
	UID           uint32
	Inode         uint64 // 0 for sockets with no file (TIME_WAIT, orphans)
}

var errHeader = errors.New("header line")

// parseSockLine parses one row of the kernel's tcp/tcp6 table:
//
//	sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ...
//	 0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12345 ...
//
// Addresses are hex 32-bit words in the kernel's byte order (order; little
// endian on x86 and arm64), ports hex in host order. The header row
// returns errHeader.
func parseSockLine(line []byte, order binary.ByteOrder) (sockEntry, error) {
	var e sockEntry
	var f [10][]byte
	n := 0
	rest := line
	for n < len(f) {
		rest = bytes.TrimLeft(rest, " \t")
		if len(rest) == 0 {
			break
		}
		i := bytes.IndexAny(rest, " \t")
		if i < 0 {
			i = len(rest)
		}
		f[n] = rest[:i]
		rest = rest[i:]
		n++
	}
	if n > 0 && string(f[0]) == "sl" {
		return e, errHeader
	}
	if n < len(f) {
		return e, fmt.Errorf("%d fields, want at least %d", n, len(f))
	}
	if len(f[0]) < 2 || f[0][len(f[0])-1] != ':' {
		return e, fmt.Errorf("slot %q: want N:", f[0])
	}
	var err error
	if e.Local, err = parseHexAddrPort(f[1], order); err != nil {
		return e, fmt.Errorf("local_address: %w", err)
	}
	if e.Remote, err = parseHexAddrPort(f[2], order); err != nil {
		return e, fmt.Errorf("rem_address: %w", err)
	}
	st, err := parseHex(f[3], 2)
	if err != nil {
		return e, fmt.Errorf("st: %w", err)
	}
	e.State = uint8(st)
	uid, err := parseDec(f[7], 32)
	if err != nil {
		return e, fmt.Errorf("uid: %w", err)
	}
	e.UID = uint32(uid)
	if e.Inode, err = parseDec(f[9], 64); err != nil {
		return e, fmt.Errorf("inode: %w", err)
	}
	return e, nil
}

// parseHexAddrPort parses "0100007F:1F90" (IPv4) or 32 hex digits and a
// port (IPv6). IPv4-mapped IPv6 is returned unmapped.
func parseHexAddrPort(b []byte, order binary.ByteOrder) (netip.AddrPort, error) {
	i := bytes.IndexByte(b, ':')
	if i < 0 {
		return netip.AddrPort{}, fmt.Errorf("%q: no ':'", b)
	}
	hexAddr, hexPort := b[:i], b[i+1:]
	port, err := parseHex(hexPort, 4)
	if err != nil || len(hexPort) != 4 {
		return netip.AddrPort{}, fmt.Errorf("%q: bad port", b)
	}
	var ip [16]byte
	switch len(hexAddr) {
	case 8:
		w, err := parseHex(hexAddr, 8)
		if err != nil {
			return netip.AddrPort{}, fmt.Errorf("%q: %w", b, err)
		}
		order.PutUint32(ip[:4], uint32(w))
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[:4])), uint16(port)), nil
	case 32:
		for k := 0; k < 4; k++ {
			w, err := parseHex(hexAddr[k*8:k*8+8], 8)
			if err != nil {
				return netip.AddrPort{}, fmt.Errorf("%q: %w", b, err)
			}
			order.PutUint32(ip[k*4:], uint32(w))
		}
		return netip.AddrPortFrom(netip.AddrFrom16(ip).Unmap(), uint16(port)), nil
	default:
		return netip.AddrPort{}, fmt.Errorf("%q: address has %d hex digits, want 8 or 32", b, len(hexAddr))
	}
}

func parseHex(b []byte, maxDigits int) (uint64, error) {
	if len(b) == 0 || len(b) > maxDigits {
		return 0, fmt.Errorf("%q: want 1 to %d hex digits", b, maxDigits)
	}
	var v uint64
	for _, c := range b {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		default:
			return 0, fmt.Errorf("%q: not hex", b)
		}
		v = v<<4 | uint64(d)
	}
	return v, nil
}

func parseDec(b []byte, bits uint) (uint64, error) {
	if len(b) == 0 || len(b) > 20 {
		return 0, fmt.Errorf("%q: not a decimal number", b)
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%q: not a decimal number", b)
		}
		d := uint64(c - '0')
		if v > (^uint64(0)-d)/10 {
			return 0, fmt.Errorf("%q: overflows", b)
		}
		v = v*10 + d
	}
	if bits < 64 && v >= 1<<bits {
		return 0, fmt.Errorf("%q: overflows %d bits", b, bits)
	}
	return v, nil
}

// findSocket scans a whole tcp or tcp6 table for the socket whose local
// address is client and remote address is proxy (both normalised) and
// returns its inode. found is true when the tuple is in the table even if
// its inode is 0 (a socket without a file: closed, TIME_WAIT). A malformed
// row is an error: the kernel's format changed and guessing is not safe.
func findSocket(table []byte, client, proxy netip.AddrPort, order binary.ByteOrder) (inode uint64, found bool, err error) {
	for lineNo := 1; len(table) > 0; lineNo++ {
		var line []byte
		if i := bytes.IndexByte(table, '\n'); i >= 0 {
			line, table = table[:i], table[i+1:]
		} else {
			line, table = table, nil
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		e, err := parseSockLine(line, order)
		if err == errHeader {
			continue
		}
		if err != nil {
			return 0, false, fmt.Errorf("line %d: %w", lineNo, err)
		}
		if e.Local != client || e.Remote != proxy {
			continue
		}
		if e.Inode != 0 {
			return e.Inode, true, nil
		}
		found = true
	}
	return 0, found, nil
}

// parseStatPPid returns field 4 of /proc/<pid>/stat: "pid (comm) S ppid ...".
// comm may hold spaces and parentheses, so parsing starts after the last ')'.
func parseStatPPid(b []byte) (int, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("stat: no ')' after comm")
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 2 {
		return 0, errors.New("stat: too few fields after comm")
	}
	ppid, err := strconv.Atoi(string(f[1]))
	if err != nil || ppid < 0 {
		return 0, fmt.Errorf("stat: ppid %q: not a pid", f[1])
	}
	return ppid, nil
}

// parseStatStart returns field 22 of /proc/<pid>/stat: the process's
// start time in clock ticks since boot.
func parseStatStart(b []byte) (uint64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("stat: no ')' after comm")
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 20 {
		return 0, errors.New("stat: too few fields after comm")
	}
	start, err := strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stat: starttime %q: not a number", f[19])
	}
	return start, nil
}
