package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/attribution"
	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/ssrf"
)

// TestRealSSRFDialerDeniesLoopback wires the real ssrf.Dialer: a name the
// policy allows but that resolves to loopback is a 403 ssrf_denied, and
// an IP literal spelled in decimal is canonicalised and denied the same
// way before anything is dialled.
func TestRealSSRFDialerDeniesLoopback(t *testing.T) {
	echo := newEchoServer(t)
	res, err := ssrf.ParseHosts(strings.NewReader("127.0.0.1 allowed.test\n"))
	if err != nil {
		t.Fatal(err)
	}
	yaml := policyYAML(echo.port, fmt.Sprintf(`  literal:
    name: literal
    endpoints:
      - host: 198.51.100.7
        port: %d
    binaries:
      - path: /usr/bin/curl
`, echo.port))
	env := newEnv(t, yaml, func(c *Config) {
		c.Dialer = SSRFDialer{Dialer: &ssrf.Dialer{Resolver: res, Timeout: time.Second}}
	})
	c, resp, _ := env.connect(fmt.Sprintf("allowed.test:%d", echo.port))
	defer c.Close()
	var body DenialBody
	if err := jsonBody(resp, &body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 403 || body.Error != OutcomeSSRFDenied || body.Reason != "loopback" || body.Policy != "web" {
		t.Fatalf("%d %+v", resp.StatusCode, body)
	}
	// 2130706433 is 127.0.0.1: canonicalised, no endpoint selects it.
	c2, resp, _ := env.connect(fmt.Sprintf("2130706433:%d", echo.port))
	defer c2.Close()
	if err := jsonBody(resp, &body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 403 || body.Host != "127.0.0.1" || body.Error != OutcomePolicyDenied {
		t.Fatalf("decimal literal: %d %+v", resp.StatusCode, body)
	}
	if n := echo.accepted.Load(); n != 0 {
		t.Fatalf("upstream reached %d times", n)
	}
}

func TestDecisionAdapter(t *testing.T) {
	p, err := policy.Parse([]byte(policyYAML(443, `  api:
    endpoints:
      - host: api.test
        port: 443
        protocol: rest
        access: read-only
    binaries:
      - path: /usr/bin/curl
`)))
	if err != nil {
		t.Fatal(err)
	}
	d, err := CompileDecision(p, 7)
	if err != nil {
		t.Fatal(err)
	}
	v := d.Decide(DecideRequest{Host: "allowed.test", Port: 443, Binary: pythonExe, Ancestors: []string{curlExe}})
	if !v.Allowed || v.Entry != "web" || v.Reason != "" || !v.Scope.ExactHost || v.L7Rules {
		t.Fatalf("allowed through an ancestor: %+v", v)
	}
	v = d.Decide(DecideRequest{Host: "api.test", Port: 443, Binary: curlExe})
	if !v.Allowed || v.Entry != "api" || !v.L7Rules {
		t.Fatalf("endpoint with L7 rules: %+v", v)
	}
	v = d.Decide(DecideRequest{Host: "x.wild.test", Port: 443, Binary: curlExe})
	if !v.Allowed || v.Scope.ExactHost {
		t.Fatalf("wildcard: %+v", v)
	}
	v = d.Decide(DecideRequest{Host: "allowed.test", Port: 443})
	if v.Allowed || v.Reason != "binary_unknown" {
		t.Fatalf("unattributed caller: %+v", v)
	}
}

func TestAttributionPinnerAdapter(t *testing.T) {
	ap, err := attribution.NewPinner("", 0)
	if err != nil {
		t.Fatal(err)
	}
	pin := AttributionPinner{Pinner: ap}
	if err := pin.Pin(curlExe, curlSHA); err != nil {
		t.Fatal(err)
	}
	err = pin.Pin(curlExe, otherSHA)
	var me *MismatchError
	if !errors.As(err, &me) || me.Exe != curlExe || me.Pinned != curlSHA || me.Seen != otherSHA {
		t.Fatalf("mismatch: %v", err)
	}
}

type stubBackend struct {
	id  *attribution.Identity
	err error
}

func (s stubBackend) Lookup(context.Context, netip.AddrPort, netip.AddrPort) (*attribution.Identity, error) {
	return s.id, s.err
}

func TestAttributionBackendAdapter(t *testing.T) {
	a := AttributionBackend{Backend: stubBackend{id: &attribution.Identity{PID: 7, Exe: curlExe, SHA256: curlSHA,
		Ancestors: []attribution.Process{{PID: 6, Exe: shellExe}, {PID: 5, Exe: "/usr/bin/make"}}}}}
	id, err := a.Lookup(context.Background(), netip.MustParseAddrPort("10.0.0.2:4000"), netip.MustParseAddrPort("10.0.0.1:3128"))
	if err != nil || id.PID != 7 || id.Exe != curlExe || id.SHA256 != curlSHA || len(id.Ancestors) != 2 || id.Ancestors[1] != (Ancestor{PID: 5, Exe: "/usr/bin/make"}) {
		t.Fatalf("%+v %v", id, err)
	}
	a = AttributionBackend{Backend: stubBackend{err: attribution.ErrNotFound}}
	if _, err := a.Lookup(context.Background(), netip.AddrPort{}, netip.AddrPort{}); !errors.Is(err, attribution.ErrNotFound) {
		t.Fatalf("error not passed through: %v", err)
	}
}
