//go:build linux

package attribution

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// LookupUDP returns the sandbox process holding the UDP socket whose
// local address is client and which sends to server (a DNS query to the
// policy DNS: server is the address the sandbox sent it to, before the
// host's redirect). The socket is found by an exact sock_diag query in
// the sandbox's network namespace — connected or merely bound, as
// resolvers' sockets are — else in /proc/<pid>/net/udp by its connected
// tuple, and its holder among the sandbox's processes as for TCP. It
// names the holder only: connectors are recorded for TCP connects.
// Errors as Lookup's; the socket must still be open.
func (b *ProcBackend) LookupUDP(ctx context.Context, client, server netip.AddrPort) (*Identity, error) {
	c, s, err := checkTuple(client, server)
	if err != nil {
		return nil, err
	}
	netnsPID := b.cfg.NetnsPID()
	if netnsPID <= 0 {
		return nil, fmt.Errorf("%w: sandbox network namespace has no process (netns pid %d)", ErrNotFound, netnsPID)
	}
	var inode uint64
	if !b.cfg.NoSockDiag {
		inode, _, _, _ = b.diag.lookupProto(diagNsPath(b.cfg.ProcRoot, netnsPID), unix.IPPROTO_UDP, c, s)
	}
	if inode == 0 {
		name := "udp"
		if !c.Addr().Is4() {
			name = "udp6"
		}
		bufp := tableBufs.Get().(*[]byte)
		table, err := readAll(b.cfg.ProcRoot+"/"+strconv.Itoa(netnsPID)+"/net/"+name, bufp)
		if err == nil {
			inode, _, err = findSocket(table, c, s, b.order)
		}
		tableBufs.Put(bufp)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("attribution: udp socket table: %w", err)
		}
	}
	if inode == 0 {
		return nil, fmt.Errorf("%w: no UDP socket %v -> %v in the sandbox network namespace", ErrNotFound, client, server)
	}
	return b.holderOf(ctx, client, server, inode)
}

// LookupUDP is the /proc backend's (the eBPF programs record TCP
// connects only).
func (b *BPFBackend) LookupUDP(ctx context.Context, client, server netip.AddrPort) (*Identity, error) {
	return b.proc.LookupUDP(ctx, client, server)
}
