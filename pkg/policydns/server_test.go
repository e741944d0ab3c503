package policydns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/ocsf/ocsftest"
)

type testServer struct {
	addr     string
	resolved atomic.Int64 // names the upstream resolver was asked for
	rec      *ocsftest.Recorder
	table    *Table
	srv      *Server
}

func startServer(t *testing.T) *testServer {
	t.Helper()
	ts := &testServer{rec: ocsftest.NewRecorder(t)}
	tb, err := NewTable(5*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts.table = tb
	s, err := NewServer(Config{
		Table: tb,
		Eligible: func(name string) ([]int, int64, bool) {
			if name == "echo.test" || name == "loopy.test" {
				return []int{7007}, 2, true
			}
			return nil, 0, false
		},
		Resolve: func(_ context.Context, name string) ([]netip.Addr, error) {
			ts.resolved.Add(1)
			switch name {
			case "echo.test":
				return []netip.Addr{netip.MustParseAddr("198.51.100.9")}, nil
			case "loopy.test": // resolves to loopback only: the guard refuses it
				return nil, &DeniedError{Reason: "loopback"}
			}
			return nil, errors.New("asked to resolve an ineligible name")
		},
		Source: ocsf.NewSource("dnstest", "policy-dns", "test"),
		Events: ts.rec,
	})
	if err != nil {
		t.Fatal(err)
	}
	ts.srv = s
	ts.addr = serve(t, s)
	return ts
}

// serve runs s on a UDP and TCP pair of one loopback port until the test
// ends, and returns the address.
func serve(t *testing.T, s *Server) string {
	t.Helper()
	pc, ln := listenPair(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, pc, ln) }()
	t.Cleanup(func() { cancel(); <-done; pc.Close(); ln.Close() })
	return pc.LocalAddr().String()
}

// listenPair binds UDP and TCP on one loopback port, as the server is
// deployed (port 53 for both). The kernel picks a free UDP port; the same
// TCP port may meanwhile belong to another socket on a busy machine (an
// outgoing connection's ephemeral port, another test's listener), so a
// taken TCP half means trying another port, a bounded number of times.
func listenPair(t *testing.T) (net.PacketConn, net.Listener) {
	t.Helper()
	var lastErr error
	for i := 0; i < 20; i++ {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, ln
		}
		pc.Close()
		if !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatal(err)
		}
		lastErr = err
	}
	t.Fatalf("no loopback port free for both UDP and TCP after 20 tries: %v", lastErr)
	return nil, nil
}

func (ts *testServer) query(t *testing.T, netw, name string, qtype uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	c := &dns.Client{Net: netw, Timeout: 3 * time.Second}
	var resp *dns.Msg
	var err error
	for i := 0; i < 20; i++ { // the servers start in the background
		if resp, _, err = c.Exchange(m, ts.addr); err == nil {
			return resp
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s %s over %s: %v", dns.TypeToString[qtype], name, netw, err)
	return nil
}

func TestServerAnswersOnlyEligibleNames(t *testing.T) {
	ts := startServer(t)
	for _, netw := range []string{"udp", "tcp"} {
		r := ts.query(t, netw, "Echo.Test", dns.TypeA)
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
			t.Fatalf("%s: eligible A: %v", netw, r)
		}
		a := r.Answer[0].(*dns.A)
		addr, _ := netip.AddrFromSlice(a.A)
		if !SyntheticRange.Contains(addr) || a.Hdr.Ttl != 5 {
			t.Errorf("%s: answer %v ttl %d, want a synthetic address with TTL 5", netw, addr, a.Hdr.Ttl)
		}
		if m, err := ts.table.Lookup(netip.AddrPortFrom(addr, 7007)); err != nil || m.Real[0].String() != "198.51.100.9" {
			t.Errorf("%s: mapping %+v, %v", netw, m, err)
		}
		if r := ts.query(t, netw, "echo.test", dns.TypeAAAA); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
			t.Errorf("%s: AAAA: %v, want NOERROR with no data", netw, r)
		}
	}
	before := ts.resolved.Load()
	for _, name := range []string{"denied.test", "exfil-c2VjcmV0.attacker.test", "echo.test.evil.test"} {
		if r := ts.query(t, "udp", name, dns.TypeA); r.Rcode != dns.RcodeNameError || len(r.Answer) != 0 {
			t.Errorf("%s: %v, want NXDOMAIN", name, r)
		}
	}
	if n := ts.resolved.Load(); n != before {
		t.Errorf("refused names reached the resolver %d times", n-before)
	}
	// A client that speaks EDNS learns why (RFC 8914, Blocked).
	m := new(dns.Msg)
	m.SetQuestion("denied-edns.test.", dns.TypeA) // (another name: the limiter folds a repeat)
	m.SetEdns0(1232, false)
	r, _, err := (&dns.Client{}).Exchange(m, ts.addr)
	if err != nil || r.Rcode != dns.RcodeNameError || !hasEDE(r, dns.ExtendedErrorCodeBlocked, "not in the sandbox's network policy") {
		t.Errorf("EDNS query for denied-edns.test: %v %v, want NXDOMAIN with an Extended DNS Error", r, err)
	}
	// A name in the policy whose every address the SSRF guard refuses is
	// refused the same way, with the guard's reason.
	if r := ts.query(t, "udp", "loopy.test", dns.TypeA); r.Rcode != dns.RcodeNameError || len(r.Answer) != 0 {
		t.Errorf("loopy.test: %v, want NXDOMAIN", r)
	}
	// Other classes and message shapes.
	m = new(dns.Msg)
	m.SetQuestion("echo.test.", dns.TypeA)
	m.Question[0].Qclass = dns.ClassCHAOS
	if r, _, err := (&dns.Client{}).Exchange(m, ts.addr); err != nil || r.Rcode != dns.RcodeRefused {
		t.Errorf("class CH: %v %v, want REFUSED", r, err)
	}
	m = new(dns.Msg)
	m.SetQuestion("echo.test.", dns.TypeA)
	m.Question = append(m.Question, m.Question[0])
	// (miekg/dns answers this FORMERR itself, before the handler: no event.)
	if r, _, err := (&dns.Client{}).Exchange(m, ts.addr); err != nil || r.Rcode != dns.RcodeFormatError {
		t.Errorf("two questions: %v %v, want FORMERR", r, err)
	}

	// Events: one per query, valid OCSF, the name in dst_endpoint.domain.
	deadline := time.Now().Add(3 * time.Second)
	for len(ts.rec.ByClass(ocsf.ClassNetworkActivity)) < 10 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	evs := ts.rec.ByClass(ocsf.ClassNetworkActivity)
	var answered, refused, ssrf, failed int
	for _, ev := range evs {
		dst, _ := ev["dst_endpoint"].(map[string]any)
		u, _ := ev["unmapped"].(map[string]any)
		pd, _ := u["policy_dns"].(map[string]any)
		switch ev["status_code"] {
		case "dns_answered":
			answered++
			if dst["domain"] != "echo.test" {
				t.Errorf("answer event domain %v", dst["domain"])
			}
			if pd["query_type"] == "A" && (pd["mapping_id"] == nil || pd["synthetic"] == nil || pd["real"] == nil || pd["generation"] != float64(2)) {
				t.Errorf("answer event lacks the mapping: %v", pd)
			}
		case StatusDenied:
			refused++
			if ev["action"] != "Denied" || ev["status_detail"] != "not_eligible" || pd["rcode"] != "NXDOMAIN" {
				t.Errorf("denial event: %v", ev)
			}
		case StatusSSRFDenied:
			ssrf++
			if dst["domain"] != "loopy.test" || ev["status_detail"] != "loopback" || ev["action"] != "Denied" {
				t.Errorf("SSRF refusal event: %v", ev)
			}
		case StatusFailed:
			failed++
		}
	}
	if answered != 4 || refused != 4 || ssrf != 1 || failed != 1 {
		t.Errorf("events: %d answered, %d denied, %d ssrf, %d failed; want 4, 4, 1 and 1 (%d events)", answered, refused, ssrf, failed, len(evs))
	}
}

func hasEDE(r *dns.Msg, code uint16, text string) bool {
	opt := r.IsEdns0()
	if opt == nil {
		return false
	}
	for _, o := range opt.Option {
		if e, ok := o.(*dns.EDNS0_EDE); ok && e.InfoCode == code && strings.Contains(e.ExtraText, text) {
			return true
		}
	}
	return false
}

// FuzzAnswer feeds arbitrary messages to the handler: it never panics,
// and never answers an ineligible name with an address.
func FuzzAnswer(f *testing.F) {
	for _, name := range []string{"echo.test.", "denied.test.", "."} {
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		b, _ := m.Pack()
		f.Add(b)
	}
	tb, _ := NewTable(5*time.Second, nil)
	s, _ := NewServer(Config{
		Table:    tb,
		Eligible: func(name string) ([]int, int64, bool) { return []int{1}, 1, name == "echo.test" },
		Resolve: func(context.Context, string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("198.51.100.1")}, nil
		},
	})
	f.Fuzz(func(t *testing.T, b []byte) {
		req := new(dns.Msg)
		if req.Unpack(b) != nil {
			return
		}
		resp, ans := s.answer(req)
		if resp == nil {
			return
		}
		if len(resp.Answer) > 0 && ans.Name != "echo.test" {
			t.Fatalf("answered %q with %v", ans.Name, resp.Answer)
		}
	})
}

// Refused names go through the denial limiter: a flood of distinct names
// (an exfiltration attempt through DNS) writes the first 16 in full and
// one count event listing 16 with their counts, every refusal counted.
func TestRefusalFloodIsFolded(t *testing.T) {
	ts := startServer(t)
	const n = 300
	for i := range n {
		if r := ts.query(t, "udp", fmt.Sprintf("chunk%03d.exfil.test", i), dns.TypeA); r.Rcode != dns.RcodeNameError {
			t.Fatalf("query %d: %v", i, r)
		}
	}
	refused := func() []map[string]any {
		var out []map[string]any
		for _, ev := range ts.rec.ByClass(ocsf.ClassNetworkActivity) {
			if ev["status_code"] == StatusDenied {
				out = append(out, ev)
			}
		}
		return out
	}
	if got := len(refused()); got != MaxRefusalDetails {
		t.Fatalf("%d refusal events before the window ends, want %d", got, MaxRefusalDetails)
	}
	ts.srv.FlushRefusals(true)
	evs := refused()
	if len(evs) != MaxRefusalDetails+1 {
		t.Fatalf("%d refusal events after the flush, want %d", len(evs), MaxRefusalDetails+1)
	}
	last := evs[len(evs)-1]
	u := last["unmapped"].(map[string]any)["policy_dns"].(map[string]any)
	names, _ := u["names"].([]any)
	if last["count"] != float64(n-MaxRefusalDetails) || len(names) != MaxRefusalDetails {
		t.Fatalf("count event: count %v, %d names", last["count"], len(names))
	}
}

// A refused query's event names the process that sent it, as the
// attributor says, asked with the query's source and the address it was
// sent to (port 53 on the listener's address); answered queries are not
// attributed (they cost nothing extra), nor are refusals the limiter
// folds (a flood costs no attribution).
func TestRefusalNamesTheSender(t *testing.T) {
	rec := ocsftest.NewRecorder(t)
	tb, _ := NewTable(5*time.Second, nil)
	type call struct {
		network        string
		client, server netip.AddrPort
	}
	calls := make(chan call, 10)
	s, err := NewServer(Config{
		Table:    tb,
		Eligible: func(name string) ([]int, int64, bool) { return []int{443}, 1, name == "echo.test" },
		Resolve: func(context.Context, string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("198.51.100.9")}, nil
		},
		Source: ocsf.NewSource("dnstest", "policy-dns", "test"),
		Events: rec,
		Attribute: func(network string, client, server netip.AddrPort) *ocsf.Actor {
			calls <- call{network, client, server}
			return &ocsf.Actor{Process: &ocsf.Process{PID: 77, Name: "node", File: ocsf.ExeFile("/usr/bin/node", "")}}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{addr: serve(t, s)}
	ts.query(t, "udp", "echo.test", dns.TypeA)
	for _, netw := range []string{"udp", "tcp"} {
		// (Two names: the limiter reports the first refusal of each.)
		if r := ts.query(t, netw, "denied-"+netw+".test", dns.TypeA); r.Rcode != dns.RcodeNameError {
			t.Fatalf("%s: %v", netw, r)
		}
		var c call
		select {
		case c = <-calls:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the refusal was not attributed", netw)
		}
		server := netip.MustParseAddrPort(ts.addr)
		if c.network != netw || c.server != netip.AddrPortFrom(server.Addr(), Port) || !c.client.Addr().IsLoopback() {
			t.Errorf("attributed %+v, want %s from loopback to port 53 of %s", c, netw, server.Addr())
		}
	}
	// A repeat within the window is folded: no attribution.
	ts.query(t, "udp", "denied-udp.test", dns.TypeA)
	if len(calls) != 0 {
		t.Errorf("%d more attributions (an answer or a folded refusal was attributed)", len(calls))
	}
	deadline := time.Now().Add(3 * time.Second)
	for len(rec.ByClass(ocsf.ClassNetworkActivity)) < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	denied := 0
	for _, ev := range rec.ByClass(ocsf.ClassNetworkActivity) {
		if ev["status_code"] != StatusDenied {
			continue
		}
		denied++
		a, _ := ev["actor"].(map[string]any)
		p, _ := a["process"].(map[string]any)
		if p["pid"] != float64(77) || p["name"] != "node" {
			t.Errorf("dns_denied event actor %v, want node (77)", a)
		}
	}
	if denied != 2 {
		t.Errorf("%d dns_denied events, want 2", denied)
	}
}
