package main

import (
	"context"
	"net"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/cli"
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
	tLn   net.Listener
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
	if s.tLn, err = proxy.Listen(ctx, f.transparentListen, f.clientCC); err != nil {
		s.close()
		return nil, cli.Failf("--transparent-listen: %v", err)
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
	if s.tLn != nil {
		s.tLn.Close()
	}
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
	go func() { errc <- p.ServeTransparent(s.tLn) }()
	return nil
}

// checkSubstrateFlags: the two listeners go together.
func checkSubstrateFlags(f *flags) error {
	switch {
	case (f.dnsListen == "") != (f.transparentListen == ""):
		return cli.Usagef("--dns-listen and --transparent-listen go together (policy DNS answers with synthetic addresses only the transparent listener serves)")
	case policydns.CheckTTL(f.dnsTTL) != nil:
		return cli.Usagef("--dns-ttl %v: %v", f.dnsTTL, policydns.CheckTTL(f.dnsTTL))
	case f.dnsEpochSet && f.dnsListen == "":
		return cli.Usagef("--dns-epoch needs --dns-listen (it numbers the policy DNS's synthetic addresses)")
	}
	return nil
}

// defaultDNSTTL is the synthetic mappings' lifetime by default.
const defaultDNSTTL = 5 * time.Second
