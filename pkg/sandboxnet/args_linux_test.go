//go:build linux

package sandboxnet

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/fence"
)

// flagValue returns the value following name in argv, and whether name
// is there at all.
func flagValue(argv []string, name string) (string, bool) {
	i := slices.Index(argv, name)
	if i < 0 || i+1 >= len(argv) {
		return "", i >= 0
	}
	return argv[i+1], true
}

// The proxy's argv carries --procs whenever Config.Procs is set (0, all
// CPUs, included) and --dns-ttl only when the policy DNS runs; unset,
// neither is there and the proxy keeps its own defaults.
func TestProxyArgsProcsAndDNSTTL(t *testing.T) {
	zero, three := 0, 3
	for _, tc := range []struct {
		name      string
		procs     *int
		ttl       time.Duration
		tcp       bool
		wantProcs string // "" = absent
		wantTTL   string
	}{
		{name: "defaults", tcp: true},
		{name: "procs 3", procs: &three, wantProcs: "3"},
		{name: "procs 0 (all CPUs)", procs: &zero, wantProcs: "0"},
		{name: "ttl with tcp", ttl: 7 * time.Second, tcp: true, wantTTL: "7s"},
		{name: "ttl without tcp", ttl: 7 * time.Second},
		{name: "both", procs: &three, ttl: 1500 * time.Millisecond, tcp: true, wantProcs: "3", wantTTL: "1.5s"},
	} {
		p := &proxyProc{
			cfg: Config{PolicyPath: "/etc/p.yaml", ProxyPort: DefaultProxyPort, FencePort: DefaultFencePort,
				LogFormat: "text", LogLevel: "info", Procs: tc.procs, DNSTTL: tc.ttl},
			name: "sbx-args", initPID: 42, tcp: tc.tcp, dir: "/run/x",
			fence: &fence.Fence{HostAddr: netip.MustParseAddr("10.200.0.1")},
		}
		argv := p.args()
		if v, ok := flagValue(argv, "--procs"); v != tc.wantProcs || ok != (tc.wantProcs != "") {
			t.Errorf("%s: --procs %q (present %v), want %q; argv %s", tc.name, v, ok, tc.wantProcs, strings.Join(argv, " "))
		}
		if v, ok := flagValue(argv, "--dns-ttl"); v != tc.wantTTL || ok != (tc.wantTTL != "") {
			t.Errorf("%s: --dns-ttl %q (present %v), want %q; argv %s", tc.name, v, ok, tc.wantTTL, strings.Join(argv, " "))
		}
		if _, ok := flagValue(argv, "--dns-listen"); ok != tc.tcp {
			t.Errorf("%s: --dns-listen present %v, want %v", tc.name, ok, tc.tcp)
		}
	}
}
