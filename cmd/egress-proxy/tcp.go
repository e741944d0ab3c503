package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/fence"
	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/policydns"
	"github.com/palisade-sandbox/palisade/pkg/proxy"
	"github.com/palisade-sandbox/palisade/pkg/ssrf"
)

// tcpSubstrate is the policy DNS (UDP and TCP) and the transparent TCP
// listener of --dns-listen and --transparent-listen.
type tcpSubstrate struct {
	pc    net.PacketConn
	dnsLn net.Listener
	// tLns are the transparent listeners, one per port of
	// --transparent-listen's range.
	tLns  []net.Listener
	table *policydns.Table
}

// listenTCPSubstrate binds both before the policy loads (and before the
// capabilities go, should ADDR be a privileged port). nil when neither
// flag is set.
func listenTCPSubstrate(ctx context.Context, f *flags) (*tcpSubstrate, error) {
	if f.dnsListen == "" {
		return nil, nil
	}
	s := &tcpSubstrate{}
	var err error
	if f.dnsEpochSet {
		s.table, err = policydns.NewTableEpoch(f.dnsEpoch, f.dnsTTL, nil)
	} else {
		s.table, err = policydns.NewTable(f.dnsTTL, nil)
	}
	if err != nil {
		return nil, cli.Usagef("--dns-ttl: %v", err)
	}
	var lc net.ListenConfig
	if s.pc, err = lc.ListenPacket(ctx, "udp4", f.dnsListen); err != nil {
		return nil, cli.Failf("--dns-listen: %v", err)
	}
	if s.dnsLn, err = lc.Listen(ctx, "tcp4", f.dnsListen); err != nil {
		s.close()
		return nil, cli.Failf("--dns-listen: %v", err)
	}
	addrs, err := transparentAddrs(f.transparentListen)
	if err != nil {
		s.close()
		return nil, cli.Usagef("--transparent-listen: %v", err)
	}
	for _, a := range addrs {
		ln, err := proxy.Listen(ctx, a, f.clientCC)
		if err != nil {
			s.close()
			return nil, cli.Failf("--transparent-listen: %v", err)
		}
		s.tLns = append(s.tLns, ln)
	}
	return s, nil
}

func (s *tcpSubstrate) close() {
	if s.pc != nil {
		s.pc.Close()
	}
	if s.dnsLn != nil {
		s.dnsLn.Close()
	}
	for _, ln := range s.tLns {
		ln.Close()
	}
}

// transparentAddrs expands --transparent-listen: HOST:PORT, or
// HOST:LOW-HIGH for a range of at most fence.MaxTransparentPorts ports
// (what the fence redirects the synthetic range to: with one port, a
// client port reused for another synthetic address while its earlier
// connection is in TIME_WAIT would have its source port moved by the
// kernel's NAT, and could not be attributed).
func transparentAddrs(spec string) ([]string, error) {
	host, port, err := net.SplitHostPort(spec)
	if err != nil {
		return nil, err
	}
	lo, hi, isRange := strings.Cut(port, "-")
	if !isRange {
		return []string{spec}, nil
	}
	l, err1 := strconv.ParseUint(lo, 10, 16)
	h, err2 := strconv.ParseUint(hi, 10, 16)
	switch {
	case err1 != nil || err2 != nil || l == 0:
		return nil, fmt.Errorf("port range %q: want LOW-HIGH, 1-65535", port)
	case h < l || h-l >= fence.MaxTransparentPorts:
		return nil, fmt.Errorf("port range %q: want LOW <= HIGH and at most %d ports", port, fence.MaxTransparentPorts)
	}
	var out []string
	for p := l; p <= h; p++ {
		out = append(out, net.JoinHostPort(host, strconv.FormatUint(p, 10)))
	}
	return out, nil
}

// transparentAddrList names the transparent listeners' addresses, for
// the log.
func (s *tcpSubstrate) transparentAddrList() string {
	var a []string
	for _, ln := range s.tLns {
		a = append(a, ln.Addr().String())
	}
	return strings.Join(a, ",")
}

// serve starts the policy DNS and the transparent listener; their first
// error goes to errc. Names are resolved by the proxy's own resolver
// through the SSRF guard, never forwarded from the sandbox.
func (s *tcpSubstrate) serve(ctx context.Context, p *proxy.Proxy, d *ssrf.Dialer, src *ocsf.Source, events ocsf.Emitter, errc chan<- error) error {
	srv, err := policydns.NewServer(policydns.Config{
		Table:     s.table,
		Eligible:  p.DNSEligibility,
		Resolve:   proxy.PolicyDNSResolver(p, d),
		Source:    src,
		Events:    events,
		Attribute: p.DNSActor,
	})
	if err != nil {
		return err
	}
	p.SetMappings(s.table)
	go func() { errc <- srv.Serve(ctx, s.pc, s.dnsLn) }()
	for _, ln := range s.tLns {
		go func() { errc <- p.ServeTransparent(ln) }()
	}
	return nil
}

// checkSubstrateFlags: the two listeners go together.
func checkSubstrateFlags(f *flags) error {
	switch {
	case (f.dnsListen == "") != (f.transparentListen == ""):
		return cli.Usagef("--dns-listen and --transparent-listen go together (policy DNS answers with synthetic addresses only the transparent listener serves)")
	case policydns.CheckTTL(f.dnsTTL) != nil:
		return cli.Usagef("--dns-ttl %v: %v", f.dnsTTL, policydns.CheckTTL(f.dnsTTL))
	case f.transparentListen != "" && transparentSpecErr(f.transparentListen) != nil:
		return cli.Usagef("--transparent-listen: %v", transparentSpecErr(f.transparentListen))
	case f.dnsEpochSet && f.dnsListen == "":
		return cli.Usagef("--dns-epoch needs --dns-listen (it numbers the policy DNS's synthetic addresses)")
	}
	return nil
}

// defaultDNSTTL is the synthetic mappings' lifetime by default.
const defaultDNSTTL = 5 * time.Second

func transparentSpecErr(spec string) error {
	_, err := transparentAddrs(spec)
	return err
}
