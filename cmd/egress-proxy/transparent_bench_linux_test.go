//go:build linux

package main

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/policydns"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// Where the bench proxy serves policy DNS and transparent connections
// (BenchmarkSandboxConnectRate's and BenchmarkAgainstBaseline's
// "transparent" rows): the transparent listener on a range of ports, as
// sandboxnet runs it (its fence redirects to DefaultTransparentPorts
// ports). With one port, a client port reused for another synthetic
// address while its earlier connection's conntrack entry is in TIME_WAIT
// (as after a proxy restart, whose new epoch hands out another address)
// has its source port moved by the kernel's NAT, and the proxy refuses
// the connection (attribution_failed):
// TestBenchTransparentClientPortAcrossRestart.
const (
	benchDNSAddr          = benchHostAddr + ":5353"
	benchTransparentPort  = 3132
	benchTransparentPorts = 8
)

// benchTransparentArgs are the proxy's flags for policy DNS and the
// transparent listener (every port of the range).
func benchTransparentArgs() []string {
	return []string{"--dns-listen", benchDNSAddr, "--transparent-listen",
		net.JoinHostPort(benchHostAddr, strconv.Itoa(benchTransparentPort)) + "-" + strconv.Itoa(benchTransparentPort+benchTransparentPorts-1),
		"--dns-ttl", "30s"}
}

// redirectSynthetic does in the bench host namespace what the fence's
// host table does for a sandbox: TCP arriving from the client's veth for
// the synthetic range is redirected to the proxy's transparent listener,
// the first port of benchTransparentPort's range that makes the
// connection's reply tuple unique (the proxy reads the original
// destination with SO_ORIGINAL_DST), and TCP for floorAddr to the floor
// relay.
func (sb *benchSandbox) redirectSynthetic(b testing.TB) {
	c, err := nftables.New(nftables.WithNetNSFd(int(sb.hostNS)))
	if err != nil {
		b.Fatal(err)
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: testutil.UniqueName("pbench")})
	accept := nftables.ChainPolicyAccept
	ch := c.AddChain(&nftables.Chain{Name: "pre", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest, Policy: &accept})
	ifname := make([]byte, unix.IFNAMSIZ)
	copy(ifname, "bcl0")
	syn := policydns.SyntheticRange
	net4 := syn.Masked().Addr().As4()
	mask := binary.BigEndian.AppendUint32(nil, ^uint32(0)<<(32-syn.Bits()))
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: net4[:]},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Immediate{Register: 1, Data: binary.BigEndian.AppendUint16(nil, benchTransparentPort)},
		&expr.Immediate{Register: 2, Data: binary.BigEndian.AppendUint16(nil, benchTransparentPort+benchTransparentPorts-1)},
		&expr.Redir{RegisterProtoMin: 1, RegisterProtoMax: 2},
	}})
	// The floor rows' addresses (floor_bench_linux_test.go) to their
	// relays, the same way.
	for _, f := range []struct {
		addr string
		port uint16
	}{{floorAddr, floorPort}, {sockmapFloorAddr, sockmapFloorPort}, {rawSockmapFloorAddr, rawSockmapFloorPort}, {rawFloorAddr, rawFloorPort},
		{deferFloorAddr, deferFloorPort}, {rawDeferFloorAddr, rawDeferFloorPort}} {
		a := netip.MustParseAddr(f.addr).As4()
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a[:]},
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
			&expr.Immediate{Register: 1, Data: binary.BigEndian.AppendUint16(nil, f.port)},
			&expr.Redir{RegisterProtoMin: 1},
		}})
	}
	if err := c.Flush(); err != nil {
		b.Fatalf("nftables redirect of the synthetic range: %v", err)
	}
	b.Cleanup(func() { c.DelTable(t); c.Flush() })
}

// resolvePolicyDNS asks the proxy's policy DNS for name's A record from
// inside the sandbox (the server answers only the sandbox's processes),
// with python3 as a sandboxed client would, and returns the synthetic
// address. It retries for up to 10 s (the server starts after the
// proxy's listener).
func (sb *benchSandbox) resolvePolicyDNS(b testing.TB, python, name string) netip.Addr {
	var out bytes.Buffer
	cmd := sb.start(b, &out, python, "-c", askDNS, benchDNSAddr, name)
	if err := cmd.Wait(); err != nil {
		b.Fatalf("policy DNS for %s: %v: %s", name, err, out.String())
	}
	got, err := netip.ParseAddr(strings.TrimSpace(out.String()))
	if err != nil || !policydns.SyntheticRange.Contains(got) {
		b.Fatalf("policy DNS for %s: %q %v", name, out.String(), err)
	}
	return got
}

// askDNS prints the first A record of argv[2] from the DNS server at
// argv[1] (HOST:PORT), retrying for 10 s.
const askDNS = `
import socket, struct, sys, time
host, port = sys.argv[1].rsplit(":", 1)
name = sys.argv[2]
q = struct.pack(">HHHHHH", 0x5a5a, 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
deadline = time.monotonic() + 10
while True:
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(1)
        s.sendto(q, (host, int(port)))
        r = s.recv(4096)
        break
    except OSError as e:
        if time.monotonic() > deadline:
            sys.exit("no answer: %s" % e)
        time.sleep(0.05)
an = struct.unpack(">H", r[6:8])[0]
i = len(q)
for _ in range(an):
    if r[i] & 0xC0 == 0xC0:
        i += 2
    else:
        while r[i]:
            i += r[i] + 1
        i += 1
    typ, _, _, ln = struct.unpack(">HHIH", r[i:i + 10])
    i += 10
    if typ == 1 and ln == 4:
        print(socket.inet_ntoa(r[i:i + 4]))
        sys.exit(0)
    i += ln
sys.exit("no A record in %r" % r)
`
