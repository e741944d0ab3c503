//go:build linux

package nettest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"
)

// Ping sends one ICMP echo request to the IPv4 address addr and waits for
// the matching reply until ctx is done. It uses a raw socket (root) made
// on the calling thread, so inside Do it pings from that namespace.
func Ping(ctx context.Context, addr netip.Addr) error {
	if !addr.Is4() {
		return fmt.Errorf("nettest: ping %s: IPv4 only", addr)
	}
	c, err := net.ListenPacket("ip4:icmp", "0.0.0.0")
	if err != nil {
		return fmt.Errorf("nettest: ping: %w", err)
	}
	defer c.Close()
	id := uint16(os.Getpid())
	msg := []byte{8, 0, 0, 0, byte(id >> 8), byte(id), 0, 1, 'p', 'a', 'l', 'i', 's', 'a', 'd', 'e'}
	binary.BigEndian.PutUint16(msg[2:], checksum(msg))
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(5 * time.Second)
	}
	c.SetDeadline(dl)
	if _, err := c.WriteTo(msg, &net.IPAddr{IP: addr.AsSlice()}); err != nil {
		return fmt.Errorf("nettest: ping %s: %w", addr, err)
	}
	buf := make([]byte, 1500)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return fmt.Errorf("nettest: ping %s: %w", addr, err)
		}
		ip, _ := from.(*net.IPAddr)
		if n >= 8 && buf[0] == 0 && binary.BigEndian.Uint16(buf[4:]) == id && ip != nil && ip.IP.Equal(addr.AsSlice()) {
			return nil
		}
		if ctx.Err() != nil {
			return errors.Join(fmt.Errorf("nettest: ping %s: no reply", addr), ctx.Err())
		}
	}
}

func checksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
