package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/policydns"
)

func tcpEntry(port int) string {
	return fmt.Sprintf(`  tcp:
    endpoints:
      - host: db.test
        port: %d
        protocol: tcp
    binaries:
      - path: /usr/bin/curl
`, port)
}

// A reload that adds the first protocol: tcp endpoint to a proxy that
// started without one and without the substrate is rejected, the
// generation in force stays, and a rejection event says why; with the
// substrate, or when the first policy had one, it is an ordinary reload.
func TestReloadFirstTCPEndpoint(t *testing.T) {
	env := newEnv(t, policyYAML(9, ""))
	g1 := env.p.Current()
	env.writePolicy(policyYAML(9, tcpEntry(5432)))
	if _, err := env.p.Reload("test"); err == nil || !strings.Contains(err.Error(), "first protocol: tcp endpoint") {
		t.Fatalf("reload adding the first tcp endpoint: %v, want rejected", err)
	}
	if env.p.Current() != g1 {
		t.Fatalf("generation changed to %d", env.p.Current().Number)
	}
	cfg := configEvents(env)
	if last := cfg[len(cfg)-1]; get(last, "status") != "Failure" || !strings.Contains(fmt.Sprint(last), "protocol: tcp") {
		t.Errorf("rejection event: %v", last)
	}

	// The same reload on a proxy serving the substrate goes through.
	env2 := newEnv(t, policyYAML(9, ""))
	tb, err := policydns.NewTable(time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	env2.p.SetMappings(tb)
	env2.writePolicy(policyYAML(9, tcpEntry(5432)))
	if res, err := env2.p.Reload("test"); err != nil || !res.Changed {
		t.Fatalf("reload with the substrate: %+v %v", res, err)
	}

	// Started with one: removing and re-adding is ordinary.
	env3 := newEnv(t, policyYAML(9, tcpEntry(5432)))
	for _, y := range []string{policyYAML(9, ""), policyYAML(9, tcpEntry(5433))} {
		env3.writePolicy(y)
		if _, err := env3.p.Reload("test"); err != nil {
			t.Fatalf("reload of a proxy started with a tcp endpoint: %v", err)
		}
	}
	if _, _, ok := env3.p.DNSEligibility("db.test"); !ok {
		t.Error("db.test not eligible after re-adding it")
	}
}

// The transparent listener relays an eligible, mapped connection to the
// mapping's real address and resets a missing, expired or wrong-port
// mapping and a binary outside the entry, each with a 4001 event that
// carries the mapping.
func TestTransparentListener(t *testing.T) {
	checkSocketLeaks(t)
	echo := newEchoServer(t)
	var mu sync.Mutex
	var orig netip.AddrPort
	exe := curlExe
	env := newEnv(t, policyYAML(9, tcpEntry(echo.port)), func(c *Config) {
		c.Attributor = &fakeAttributor{fn: func(_, _ netip.AddrPort) (*Identity, error) {
			mu.Lock()
			defer mu.Unlock()
			return identityOf(exe, curlSHA, shellExe), nil
		}}
		c.OriginalDst = func(*net.TCPConn) (netip.AddrPort, error) {
			mu.Lock()
			defer mu.Unlock()
			return orig, nil
		}
	})
	now := time.Unix(1_000_000, 0)
	tb, err := policydns.NewTable(2*time.Second, func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	})
	if err != nil {
		t.Fatal(err)
	}
	env.p.SetMappings(tb)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- env.p.ServeTransparent(ln) }()
	ports, gen, ok := env.p.DNSEligibility("db.test")
	if !ok {
		t.Fatal("db.test not eligible")
	}
	m, err := tb.Map("db.test", []netip.Addr{netip.MustParseAddr("127.0.0.1")}, ports, gen)
	if err != nil {
		t.Fatal(err)
	}
	try := func(dst netip.AddrPort) (string, error) {
		mu.Lock()
		orig = dst
		mu.Unlock()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := fmt.Fprintf(c, "hello\n"); err != nil {
			return "", err
		}
		return bufio.NewReader(c).ReadString('\n')
	}
	if got, err := try(netip.AddrPortFrom(m.Synthetic, uint16(echo.port))); err != nil || got != "hello\n" {
		t.Fatalf("mapped connection: %q %v", got, err)
	}
	refused := func(what string, dst netip.AddrPort) {
		t.Helper()
		got, err := try(dst)
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("%s: %q %v, want a reset", what, got, err)
		}
	}
	refused("wrong port", netip.AddrPortFrom(m.Synthetic, 1))
	// An address of this epoch's range never handed out, and one of
	// the next epoch's (a client that cached it across a restart).
	unused := tb.Range().Addr().Next()
	if unused == m.Synthetic {
		unused = unused.Next()
	}
	refused("no mapping", netip.AddrPortFrom(unused, 5432))
	otherEpoch := policydns.EpochRange(tb.Epoch() + 1).Addr().Next()
	refused("another epoch's address", netip.AddrPortFrom(otherEpoch, 5433))
	// (The expired one first: the denial limiter would fold two denials
	// of one binary, host and port into one event.)
	mu.Lock()
	now = now.Add(3 * time.Second)
	mu.Unlock()
	refused("expired", netip.AddrPortFrom(m.Synthetic, uint16(echo.port)))
	mu.Lock()
	exe = "/usr/bin/python3"
	mu.Unlock()
	m2, err := tb.Map("db.test", m.Real, ports, gen)
	if err != nil {
		t.Fatal(err)
	}
	refused("binary", netip.AddrPortFrom(m2.Synthetic, uint16(echo.port)))

	evs := env.waitEvents(ocsf.ClassNetworkActivity, 6)
	reasons := map[string]bool{}
	for _, e := range evs {
		if get(e, "unmapped", "egress_proxy", "listener") != ListenerTransparent {
			continue
		}
		r := get(e, "unmapped", "egress_proxy", "reason").(string)
		if e["action"] == "Allowed" {
			r = "allowed"
		}
		reasons[r] = true
		if r == ReasonNoMapping || r == ReasonOtherEpoch {
			want := map[string]netip.Addr{ReasonNoMapping: unused, ReasonOtherEpoch: otherEpoch}[r]
			if get(e, "unmapped", "egress_proxy", "transparent", "synthetic") != want.String() {
				t.Errorf("%s event: %v, want synthetic %v", r, e, want)
			}
			continue
		}
		want := m
		if r == "binary_not_allowed" {
			want = m2
		}
		if get(e, "unmapped", "egress_proxy", "transparent", "mapping_id") != want.ID ||
			get(e, "unmapped", "egress_proxy", "transparent", "synthetic") != want.Synthetic.String() ||
			get(e, "unmapped", "egress_proxy", "transparent", "generation") != float64(gen) {
			t.Errorf("%s event lacks the mapping: %v", r, e)
		}
	}
	for _, r := range []string{"allowed", ReasonWrongPort, ReasonNoMapping, ReasonOtherEpoch, "binary_not_allowed", ReasonMappingExpired} {
		if !reasons[r] {
			t.Errorf("no transparent event with reason %s (have %v)", r, reasons)
		}
	}
}
