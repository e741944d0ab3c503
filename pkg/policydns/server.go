package policydns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/palisade-sandbox/palisade/pkg/denylimit"
	"github.com/palisade-sandbox/palisade/pkg/ocsf"
)

// Eligibility says whether name may be resolved: the ports of the
// endpoints whose host selects it (an exact host or a wildcard pattern,
// any protocol) in the policy generation gen. ok false: refused.
type Eligibility func(name string) (ports []int, gen int64, ok bool)

// Resolver resolves an eligible name to real addresses that already
// passed the SSRF guard (for example ssrf.Dialer.Resolve). A *DeniedError
// says the guard refused every address: the name is refused like one
// outside the policy, with the guard's reason.
type Resolver func(ctx context.Context, name string) ([]netip.Addr, error)

// DeniedError is a Resolver's refusal: every address of the name is one
// the SSRF guard refuses (Reason: loopback, private_not_allowed, ...).
type DeniedError struct{ Reason string }

func (e *DeniedError) Error() string { return "policydns: every address refused: " + e.Reason }

// Status codes of policy DNS events (status_code).
const (
	// StatusAnswered: a synthetic address, or NODATA for a type other
	// than A of an eligible name.
	StatusAnswered = "dns_answered"
	// StatusDenied: the name is not in the policy (NXDOMAIN).
	StatusDenied = "dns_denied"
	// StatusSSRFDenied: the name is in the policy, but the SSRF guard
	// refused every address it resolves to (NXDOMAIN).
	StatusSSRFDenied = "ssrf_denied"
	// StatusFailed: the query could not be answered (SERVFAIL: the
	// proxy's resolution failed, too many queries or mappings; FORMERR,
	// REFUSED: not one IN query).
	StatusFailed = "dns_failed"
)

// Config configures a Server.
type Config struct {
	Table    *Table
	Eligible Eligibility
	Resolve  Resolver
	// Source and Events receive one Network Activity (4001) event per
	// query answered, and the refusals through the denial limiter (see
	// DenyWindow). Events nil: none.
	Source *ocsf.Source
	Events ocsf.Emitter
	// DenyWindow folds refusals as the egress proxy folds denials
	// (package denylimit): per refusal reason, the first refusal of each
	// distinct name is an event (up to MaxRefusalDetails names a window),
	// the rest are counted, and a count event per window lists up to
	// MaxRefusalDetails names with their counts, so a flood of refused
	// names (an exfiltration attempt, a scan) writes a bounded number of
	// events. 0 means DefaultDenyWindow; negative, no folding.
	DenyWindow time.Duration
	// Now is the clock (tests); nil is time.Now.
	Now func() time.Time
	// Attribute, when set, names the process that sent a refused query
	// (its event's actor; nil when it cannot be named): network is "udp"
	// or "tcp", client the query's source and server the address it was
	// sent to (Port on the listener's address: the sandbox asks port 53,
	// which the host redirects here). It runs before the refusal is
	// written, while the client's socket still exists, only for a
	// refusal the limiter reports at once, and for at most
	// MaxAttributions queries at once (others go without an actor).
	Attribute func(network string, client, server netip.AddrPort) *ocsf.Actor
}

// DefaultDenyWindow is the refusal folding window by default (the egress
// proxy's).
const DefaultDenyWindow = 10 * time.Second

// MaxRefusalDetails bounds the names named in full, and listed in a
// count event, per refusal reason and window.
const MaxRefusalDetails = 16

// Port is the port sandboxes send their queries to; the host's nftables
// redirect it to the server's listener.
const Port = 53

// MaxAttributions bounds the refused queries attributed at once: a flood
// of refused names costs at most this many /proc searches in flight.
const MaxAttributions = 4

// Server answers DNS queries from the sandbox. It implements dns.Handler.
type Server struct {
	cfg     Config
	sem     chan struct{}
	attrSem chan struct{}
	limiter *denylimit.Detailed[string, string, refusal]
}

// refusal is one refused query as its event needs it.
type refusal struct {
	client, local net.Addr
	ans           Answer
}

// NewServer checks cfg. Errors name the missing field.
func NewServer(cfg Config) (*Server, error) {
	switch {
	case cfg.Table == nil:
		return nil, errors.New("policydns: Config.Table: required")
	case cfg.Eligible == nil:
		return nil, errors.New("policydns: Config.Eligible: required")
	case cfg.Resolve == nil:
		return nil, errors.New("policydns: Config.Resolve: required")
	case cfg.Events != nil && cfg.Source == nil:
		return nil, errors.New("policydns: Config.Source: required with Events")
	}
	if cfg.DenyWindow == 0 {
		cfg.DenyWindow = DefaultDenyWindow
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Server{cfg: cfg, sem: make(chan struct{}, MaxConcurrent), attrSem: make(chan struct{}, MaxAttributions),
		limiter: denylimit.NewDetailed[string, string, refusal](cfg.DenyWindow, 1024, "overflow", MaxRefusalDetails)}, nil
}

// Serve answers on pc (UDP) and ln (TCP) until ctx ends; either may be
// nil. It returns the first serving error.
func (s *Server) Serve(ctx context.Context, pc net.PacketConn, ln net.Listener) error {
	var servers []*dns.Server
	if pc != nil {
		servers = append(servers, &dns.Server{PacketConn: pc, Handler: s, UDPSize: MaxMessage,
			ReadTimeout: ExchangeTimeout, WriteTimeout: ExchangeTimeout})
	}
	if ln != nil {
		servers = append(servers, &dns.Server{Listener: ln, Handler: s, ReadTimeout: ExchangeTimeout,
			WriteTimeout: ExchangeTimeout, IdleTimeout: func() time.Duration { return ExchangeTimeout }})
	}
	errc := make(chan error, len(servers))
	for _, srv := range servers {
		go func() { errc <- srv.ActivateAndServe() }()
	}
	var tick <-chan time.Time
	if s.cfg.DenyWindow > 0 {
		t := time.NewTicker(s.cfg.DenyWindow)
		defer t.Stop()
		tick = t.C
	}
	var err error
wait:
	for {
		select {
		case <-ctx.Done():
			break wait
		case err = <-errc:
			break wait
		case <-tick:
			s.FlushRefusals(false)
		}
	}
	for _, srv := range servers {
		srv.Shutdown()
	}
	s.FlushRefusals(true)
	return err
}

// FlushRefusals emits the count events of folded refusals that are due
// (all of them when all is set). Serve calls it every DenyWindow and
// when it returns.
func (s *Server) FlushRefusals(all bool) {
	now := s.cfg.Now()
	if all {
		now = now.Add(s.cfg.DenyWindow)
	}
	for _, f := range s.limiter.Flush(now, all) {
		s.emitEvent(f.Value.client, f.Value.local, f.Value.ans, f.Count, f.First, f.Tallies)
	}
}

// Answer describes one query's outcome (the event's fields).
type Answer struct {
	Name    string
	Type    string
	Rcode   string
	Status  string // Status* constant
	Reason  string
	Mapping *Mapping
	// Actor is the process that sent a refused query, when known.
	Actor *ocsf.Actor
}

// ServeDNS implements dns.Handler. An answer's event is written after
// it; a refusal goes through the limiter (Config.DenyWindow) first, and
// one reported at once is attributed before the refusal goes out, while
// the client's socket still exists.
func (s *Server) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	resp, ans := s.answer(req)
	if resp == nil {
		return
	}
	client, local := w.RemoteAddr(), w.LocalAddr()
	if s.cfg.Events == nil || answered(ans) {
		w.WriteMsg(resp)
		if s.cfg.Events != nil {
			s.emitEvent(client, local, ans, 1, time.Time{}, nil)
		}
		return
	}
	now := s.cfg.Now()
	r := s.limiter.Admit(ans.Reason, ans.Name, refusal{client, local, ans}, now, now)
	if r.Report {
		ans.Actor = s.attribute(client, local)
	}
	w.WriteMsg(resp)
	if r.Report {
		s.emitEvent(client, local, ans, r.Count, r.First, r.Tallies)
	}
}

// answered reports whether an answer is one (a mapping, or NODATA for a
// name that exists) rather than a refusal.
func answered(a Answer) bool { return a.Status == StatusAnswered }

// attribute names the sender of a refused query (Config.Attribute), or
// nil: no attributor, too many attributions in flight, not found.
func (s *Server) attribute(client, local net.Addr) *ocsf.Actor {
	if s.cfg.Attribute == nil {
		return nil
	}
	select {
	case s.attrSem <- struct{}{}:
		defer func() { <-s.attrSem }()
	default:
		return nil
	}
	c, err1 := netip.ParseAddrPort(client.String())
	l, err2 := netip.ParseAddrPort(local.String())
	if err1 != nil || err2 != nil {
		return nil
	}
	network := "udp"
	if _, ok := local.(*net.TCPAddr); ok {
		network = "tcp"
	}
	return s.cfg.Attribute(network, netip.AddrPortFrom(c.Addr().Unmap(), c.Port()), netip.AddrPortFrom(l.Addr().Unmap(), Port))
}

// answer builds the response to req; nil for a message that is not a
// query at all (dropped).
func (s *Server) answer(req *dns.Msg) (*dns.Msg, Answer) {
	if req.Response {
		return nil, Answer{}
	}
	resp := new(dns.Msg)
	resp.SetReply(req)
	resp.RecursionAvailable = false
	ans := Answer{}
	fail := func(rcode int, reason string) (*dns.Msg, Answer) {
		resp.Rcode = rcode
		resp.Answer = nil
		ans.Rcode, ans.Status, ans.Reason = dns.RcodeToString[rcode], StatusFailed, reason
		return resp, ans
	}
	// deny answers NXDOMAIN: the name does not exist for this sandbox.
	// Resolvers give up at once (getaddrinfo's EAI_NONAME, Node's
	// ENOTFOUND), where REFUSED or SERVFAIL read as a broken resolver
	// and are retried. An Extended DNS Error (RFC 8914, Blocked) says
	// why to clients that sent EDNS (dig shows it).
	deny := func(status, reason, why string) (*dns.Msg, Answer) {
		resp.Rcode = dns.RcodeNameError
		resp.Answer = nil
		if opt := req.IsEdns0(); opt != nil {
			resp.SetEdns0(MaxMessage, false)
			e := resp.IsEdns0()
			e.Option = append(e.Option, &dns.EDNS0_EDE{InfoCode: dns.ExtendedErrorCodeBlocked, ExtraText: why})
		}
		ans.Rcode, ans.Status, ans.Reason = dns.RcodeToString[dns.RcodeNameError], status, reason
		return resp, ans
	}
	if req.Opcode != dns.OpcodeQuery || len(req.Question) != 1 {
		return fail(dns.RcodeFormatError, "not_one_query")
	}
	q := req.Question[0]
	ans.Name = strings.ToLower(strings.TrimSuffix(q.Name, "."))
	ans.Type = dns.TypeToString[q.Qtype]
	if req.Len() > MaxMessage {
		return fail(dns.RcodeFormatError, "message_too_large")
	}
	if q.Qclass != dns.ClassINET {
		return fail(dns.RcodeRefused, "class_not_in")
	}
	ports, gen, ok := s.cfg.Eligible(ans.Name)
	if !ok {
		return deny(StatusDenied, "not_eligible", "palisade: not in the sandbox's network policy")
	}
	if q.Qtype != dns.TypeA {
		// NODATA: the name exists, only IPv4 synthetic addresses do.
		ans.Rcode, ans.Status, ans.Reason = dns.RcodeToString[dns.RcodeSuccess], StatusAnswered, "no_data"
		return resp, ans
	}
	select {
	case s.sem <- struct{}{}:
		defer func() { <-s.sem }()
	default:
		return fail(dns.RcodeServerFailure, "too_many_queries")
	}
	ctx, cancel := context.WithTimeout(context.Background(), ExchangeTimeout)
	real, err := s.cfg.Resolve(ctx, ans.Name)
	cancel()
	var de *DeniedError
	switch {
	case errors.As(err, &de):
		return deny(StatusSSRFDenied, de.Reason, "palisade: address refused ("+de.Reason+")")
	case err != nil || len(real) == 0:
		return fail(dns.RcodeServerFailure, "resolve_failed")
	}
	m, err := s.cfg.Table.Map(ans.Name, real, ports, gen)
	if err != nil {
		return fail(dns.RcodeServerFailure, "mappings_full")
	}
	ans.Mapping = &m
	ttl := uint32(s.cfg.Table.TTL() / time.Second)
	resp.Answer = []dns.RR{&dns.A{
		Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl},
		A:   m.Synthetic.AsSlice(),
	}}
	ans.Rcode, ans.Status = dns.RcodeToString[dns.RcodeSuccess], StatusAnswered
	return resp, ans
}

// emitEvent reports one answer as a Network Activity (4001) event: query
// name in dst_endpoint.domain, the mapping under unmapped.policy_dns;
// count, first and tallies are a folded refusal's (count 1 otherwise).
func (s *Server) emitEvent(client, local net.Addr, a Answer, count int, first time.Time, tallies []denylimit.Tally[string]) {
	c := ocsf.Conn{Protocol: "udp", Dst: &ocsf.NetworkEndpoint{Domain: a.Name}, Actor: a.Actor}
	if _, ok := local.(*net.TCPAddr); ok {
		c.Protocol = "tcp"
	}
	if ap, err := netip.ParseAddrPort(local.String()); err == nil {
		c.Dst.IP, c.Dst.Port = ap.Addr().Unmap().String(), int(ap.Port())
	}
	if ap, err := netip.ParseAddrPort(client.String()); err == nil {
		c.Src = &ocsf.NetworkEndpoint{IP: ap.Addr().Unmap().String(), Port: int(ap.Port())}
	}
	allowed := answered(a)
	reason := a.Reason
	if reason == "" {
		reason = "answered"
	}
	e := s.cfg.Source.NetworkOpen(c, ocsf.Decision{Allowed: allowed, Code: a.Status, Reason: reason,
		Rule: &ocsf.FirewallRule{Name: "policy-dns", Type: "policy_dns"}})
	e.Message = fmt.Sprintf("policy DNS %s %s: %s (%s)", a.Type, a.Name, a.Rcode, reason)
	u := map[string]any{"query_type": a.Type, "rcode": a.Rcode, "epoch": fmt.Sprintf("%016x", s.cfg.Table.Epoch())}
	if m := a.Mapping; m != nil {
		real := make([]string, len(m.Real))
		for i, r := range m.Real {
			real[i] = r.String()
		}
		u["mapping_id"], u["synthetic"], u["real"], u["generation"], u["ttl"] = m.ID, m.Synthetic.String(), real, m.Generation, int(s.cfg.Table.TTL()/time.Second)
	}
	if count > 1 {
		e.Count = count
		e.Message = fmt.Sprintf("policy DNS refused %d queries (%s), last %s %s", count, reason, a.Type, a.Name)
		if !first.IsZero() {
			e.StartTime, e.EndTime = first.UnixMilli(), s.cfg.Now().UnixMilli()
		}
	}
	if len(tallies) > 0 {
		names := make([]map[string]any, len(tallies))
		for i, t := range tallies {
			names[i] = map[string]any{"name": t.Detail, "count": t.Count}
		}
		u["names"] = names
	}
	e.Unmapped = map[string]any{"policy_dns": u}
	s.cfg.Events.Emit(e)
}
